// Sharding applied to a plain model (see shard_model.h).
#include "executor/sharding/shard_model.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/communicator.h"
#include "executor/torch_compat.h"
#include "planner/gradient_path.h"

namespace llmplan::executor {

at::ScalarType ScalarTypeOf(DType dtype) { return dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat; }

at::ScalarType ComputeDtype(const Plan& plan) { return ScalarTypeOf(plan.param_dtype); }

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

namespace {

// Unit u's whole initial values, fp32 on the host (equal to the one-process
// initialisation whatever the sharding).
at::Tensor InitialValues(const LlamaModel& model, int u, uint64_t seed) {
  int64_t numel = 0;
  for (const auto& shape : model.unit_params(u)) numel += shape.numel();
  at::Tensor full = at::zeros({numel}, at::TensorOptions().dtype(at::kFloat));
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const auto& shape : model.unit_params(u)) {
    views.push_back(full.narrow(0, offset, shape.numel()).view(shape.shape));
    offset += shape.numel();
  }
  model.InitUnit(u, views, seed);
  return full;
}

}  // namespace

std::vector<FlatUnit> MakeShardedUnits(const LlamaModel& model, const Plan& plan, const at::Device& device,
                                       int shard_rank, const UnitValues& values) {
  FlatUnitOptions options;
  options.compute_dtype = ComputeDtype(plan);
  options.master_on_host = OffloadsOptimizer(plan.offload) || OffloadsParams(plan.offload);
  options.compute_shard_on_host = OffloadsOptimizer(plan.offload) && OffloadsParams(plan.offload);
  options.optimizer_reads_compute_grad = OptimizerReadsComputeGradient(plan, device.is_cuda());
  // Each unit draws its initial values from its own generator on the host,
  // one normal at a time (a generator is sequential): for an 8B model that is
  // a minute on one core. Units are independent, so a batch of them is drawn
  // on parallel threads, then handed to the device in order.
  const int n = model.num_units();
  const int batch = std::max(1, std::min(8, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<FlatUnit> units;
  units.reserve(n);
  for (int first = 0; first < n; first += batch) {
    const int last = std::min(n, first + batch);
    std::vector<at::Tensor> full(last - first);
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> failed(last - first);
    for (int u = first; u < last && !values; ++u) {
      threads.emplace_back([&, u] {
        try {
          full[u - first] = InitialValues(model, u, plan.seed);
        } catch (...) {
          failed[u - first] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : failed)
      if (e) std::rethrow_exception(e);
    for (int u = first; u < last; ++u) {
      // An edge unit kept whole (replicate_edges) is a group of one on every
      // rank. Resident units never release (and never gather: the optimizer
      // step refreshes the resident copy).
      FlatUnitOptions unit_options = options;
      unit_options.group_size = plan.UnitShardGroup(u);
      unit_options.rank = unit_options.group_size == 1 ? 0 : shard_rank;
      unit_options.compute_resident = plan.UnitResident(u);
      unit_options.cast_at_gather = plan.cast_at_gather && unit_options.group_size > 1;
      units.emplace_back(model.unit_params(u), unit_options, device);
      FlatUnit& unit = units.back();
      if (values) {
        unit.SetMasterOwned(values(u, unit.owned_begin(), unit.owned_numel()));
      } else {
        unit.SetMasterFromFull(full[u - first]);  // this rank's slice
      }
      full[u - first] = at::Tensor();
      if (unit.group_size() == 1 && unit_options.compute_resident) {
        unit.GatherLocal();
        unit.ReleaseComputeGrad();  // each backward materialises it (15 GiB of bf16 idle for an 8B model)
      } else {
        // Gathered and gradient copies cost memory only while the program
        // says so (gather .. release, backward .. reduce-scatter).
        unit.ReleaseCompute();
        unit.ReleaseComputeGrad();
      }
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
