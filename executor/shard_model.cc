// Sharding applied to a plain model (see shard_model.h).
#include "executor/shard_model.h"

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/communicator.h"
#include "executor/torch_compat.h"

namespace llmplan::executor {

at::ScalarType ComputeDtype(const Plan& plan) {
  return plan.param_dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat;
}

std::vector<FlatUnit> MakeFlatUnits(const LlamaModel& model, const at::Device& device, at::ScalarType compute_dtype,
                                    uint64_t seed) {
  std::vector<FlatUnit> units;
  units.reserve(model.num_units());
  for (int u = 0; u < model.num_units(); ++u) {
    units.emplace_back(model.unit_params(u), /*group_size=*/1, /*rank=*/0, device, compute_dtype);
    model.InitUnit(u, units.back().MasterViews(), seed);
    units.back().GatherLocal();
  }
  return units;
}

std::vector<FlatUnit> MakeShardedUnits(const LlamaModel& model, const Plan& plan, const at::Device& device,
                                       int shard_rank) {
  FlatUnitOptions options;
  options.group_size = plan.shard_group_size;
  options.rank = shard_rank;
  options.compute_dtype = ComputeDtype(plan);
  options.master_on_host = OffloadsOptimizer(plan.offload);
  // no_shard programs never release (and never gather: the optimizer step
  // refreshes the resident copy).
  options.compute_resident = plan.strategy == ShardingStrategy::kNoShard;
  std::vector<FlatUnit> units;
  units.reserve(model.num_units());
  for (int u = 0; u < model.num_units(); ++u) {
    units.emplace_back(model.unit_params(u), options, device);
    FlatUnit& unit = units.back();
    // The whole unit's initial values on the host (each unit draws from its
    // own generator, so this equals the one-process initialisation), then
    // this rank's slice.
    at::Tensor full = at::zeros({unit.numel()}, at::TensorOptions().dtype(at::kFloat));
    std::vector<at::Tensor> views;
    int64_t offset = 0;
    for (const auto& shape : unit.shapes()) {
      views.push_back(full.narrow(0, offset, shape.numel()).view(shape.shape));
      offset += shape.numel();
    }
    model.InitUnit(u, views, plan.seed);
    unit.SetMasterFromFull(full);
    if (unit.group_size() == 1) {
      unit.GatherLocal();
      unit.ReleaseComputeGrad();  // each backward materialises it (15 GiB of bf16 idle for an 8B model)
    } else {
      // Gathered and gradient copies cost memory only while the program
      // says so (gather .. release, backward .. reduce-scatter).
      unit.ReleaseCompute();
      unit.ReleaseComputeGrad();
    }
  }
  return units;
}

at::Tensor FullMaster(FlatUnit& unit, Communicator* shard, CollectiveWatchdog* watchdog, const std::string& name) {
  at::NoGradGuard no_grad;
  if (unit.group_size() == 1) return unit.master().narrow(0, 0, unit.numel()).to(at::kCPU, at::kFloat, false, true);
  TORCH_CHECK(shard != nullptr && shard->size() == unit.group_size(), "FullMaster: needs the shard group of ",
              unit.group_size(), " ranks");
  // fp32 all-gather on the communicator's device: the GPU for NCCL (an
  // offloaded master is copied up), the host for Gloo.
  const at::Device comm_device = unit.device().is_cuda() ? unit.device() : at::Device(at::kCPU);
  at::Tensor mine = unit.master().to(comm_device, at::kFloat, false, true);
  at::Tensor all = at::empty({unit.padded_numel()}, mine.options());
  const std::string what = "all-gather fp32 master " + name + " for the final weights";
  std::shared_ptr<CollectiveWork> work = shard->AllGather(mine, all, what);
  if (watchdog != nullptr) watchdog->Watch(work, what, shard->name());  // the host blocks on it just below
  work->Wait();
  return all.narrow(0, 0, unit.numel()).to(at::kCPU).clone();
}

std::vector<int64_t> ShardNumels(const std::vector<FlatUnit>& units) {
  std::vector<int64_t> n;
  for (const auto& u : units) n.push_back(u.shard_numel());
  return n;
}

}  // namespace llmplan::executor
