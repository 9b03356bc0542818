#include "executor/train_step.h"

#include <cmath>
#include <optional>

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/communicator.h"
#include "executor/host_memory.h"
#include "executor/loss/chunked_cross_entropy.h"
#include "executor/torch_compat.h"
#include "planner/user_error.h"

#ifdef LLMPLAN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

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

// ---------------------------------------------------------------------------
// Collectives in flight and copy streams

struct StepInterpreter::Pending {
  int unit = -1;
  std::shared_ptr<CollectiveWork> work;
  std::function<void()> finish;        // applies the result (runs after Wait, in order on the compute stream)
  std::vector<at::Tensor> keep_alive;  // temporaries the collective reads or writes
};

// Offload copies on their own streams (CUDA): a copy waits for the compute
// stream's work so far with an event (the host never blocks to order it), and
// records its own completion event; the CPU optimizer blocks the host only on
// the one copy it needs. On the CPU copies are synchronous memcpys.
struct StepInterpreter::CopyStreams {
  explicit CopyStreams(const at::Device& d) : device(d) {
#ifdef LLMPLAN_WITH_CUDA
    if (device.is_cuda()) {
      to_host.emplace(c10::cuda::getStreamFromPool(false, device.index()));
      to_device.emplace(c10::cuda::getStreamFromPool(false, device.index()));
    }
#endif
  }
  // Runs `copy` on the stream for `kind`, after the current stream's queued work.
  void Run(StreamKind kind, int op_id, const std::function<void()>& copy) {
#ifdef LLMPLAN_WITH_CUDA
    if (device.is_cuda()) {
      c10::cuda::CUDAStream stream = kind == StreamKind::kDeviceToHost ? *to_host : *to_device;
      at::cuda::CUDAEvent ready;
      ready.record(at::cuda::getCurrentCUDAStream(device.index()));
      ready.block(stream);
      {
        c10::cuda::CUDAStreamGuard guard(stream);
        copy();
      }
      auto done = std::make_unique<at::cuda::CUDAEvent>();
      done->record(stream);
      events[op_id] = std::move(done);
      return;
    }
#endif
    (void)kind;
    (void)op_id;
    copy();
  }
  // The host waits for copy `op_id` (the CPU optimizer reads its result).
  void HostWait(int op_id) {
#ifdef LLMPLAN_WITH_CUDA
    auto it = events.find(op_id);
    if (it != events.end()) it->second->synchronize();
#else
    (void)op_id;
#endif
  }
  // The current stream waits for copy `op_id` (no host block).
  void DeviceWait(int op_id) {
#ifdef LLMPLAN_WITH_CUDA
    auto it = events.find(op_id);
    if (it != events.end()) it->second->block(at::cuda::getCurrentCUDAStream(device.index()));
#else
    (void)op_id;
#endif
  }
  void DeviceWaitAll() {
#ifdef LLMPLAN_WITH_CUDA
    for (auto& [id, event] : events) event->block(at::cuda::getCurrentCUDAStream(device.index()));
    events.clear();
#endif
  }

  at::Device device;
#ifdef LLMPLAN_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> to_host, to_device;
  std::map<int, std::unique_ptr<at::cuda::CUDAEvent>> events;
#endif
};

StepInterpreter::StepInterpreter(const Plan& plan, const LlamaModel& model, std::vector<FlatUnit>& units,
                                 AdamW& optimizer, StepProgram program, const at::Device& device, StepComms comms)
    : plan_(plan),
      model_(model),
      units_(units),
      optimizer_(optimizer),
      program_(std::move(program)),
      device_(device),
      timer_(std::make_unique<compat::OpTimer>(device)),
      comms_(comms),
      offload_(OffloadsOptimizer(plan.offload)),
      copies_(std::make_unique<CopyStreams>(device)) {
  if (OffloadsParams(plan.offload))
    throw UserError("plan offloads '" + OffloadName(plan.offload) +
                    "': the executor offloads the optimizer only; make the plan with llmplan estimate --offload "
                    "optimizer (or none)");
  const int S = plan.shard_group_size, R = plan.ReplicaGroups();
  auto group_ok = [](Communicator* c, int size) { return size == 1 ? (c == nullptr || c->size() == 1) : (c && c->size() == size); };
  if (!group_ok(comms_.shard, S) || !group_ok(comms_.replica, R))
    throw UserError("plan for " + std::to_string(plan.gpus) + " GPUs (shard groups of " + std::to_string(S) + ", " +
                    std::to_string(R) + " replica groups) but this process was given " +
                    (comms_.shard ? std::to_string(comms_.shard->size()) : std::string("no")) + " x " +
                    (comms_.replica ? std::to_string(comms_.replica->size()) : std::string("no")) +
                    " ranks: start one process per GPU (llmplan run launches them; torchrun and srun work too)");
  if (static_cast<int>(units.size()) != model.num_units() ||
      static_cast<int>(program_.units.size()) != model.num_units())
    throw UserError("step program has " + std::to_string(program_.units.size()) + " units, the model " +
                    std::to_string(model.num_units()));
  for (int u = 0; u < model.num_units(); ++u) {
    TORCH_CHECK(units[u].group_size() == S && units[u].padded_numel() == program_.units[u].padded_params,
                "unit ", u, " was not made for this plan's shard group of ", S);
    TORCH_CHECK(units[u].master_on_host() == offload_, "unit ", u, " master placement does not match the plan's offload");
  }
  for (const auto& op : program_.ops) {
    if (op.kind == OpKind::kAllGather) program_gathers_ = true;
  }
  if (offload_) {
    for (auto& unit : units_) {
      host_grads_.push_back(PinnedHostZeros(unit.shard_numel(), at::kFloat));
      host_compute_.push_back(PinnedHostZeros(unit.shard_numel(), unit.compute_dtype()));
    }
  }
  rope_ = model.MakeRopeTable(plan.seq_len, device, ComputeDtype(plan));
}

StepInterpreter::~StepInterpreter() {
  // Collectives still in flight (an exception unwound Run) must finish
  // before the buffers they write are freed.
  for (auto& [id, p] : pending_) {
    try {
      p->work->Wait();
    } catch (...) {
    }
  }
}

void StepInterpreter::Track(int op_id, int unit, std::shared_ptr<CollectiveWork> work, std::function<void()> finish,
                            std::vector<at::Tensor> keep_alive, const std::string& what, Communicator* group) {
  if (comms_.watchdog != nullptr) comms_.watchdog->Watch(work, what, group->name());
  auto p = std::make_unique<Pending>();
  p->unit = unit;
  p->work = std::move(work);
  p->finish = std::move(finish);
  p->keep_alive = std::move(keep_alive);
  pending_[op_id] = std::move(p);
}

void StepInterpreter::Finish(int op_id) {
  auto it = pending_.find(op_id);
  if (it == pending_.end()) return;
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  p->work->Wait();
  if (p->finish) p->finish();
}

void StepInterpreter::FinishUnit(int unit) {
  std::vector<int> ids;
  for (const auto& [id, p] : pending_)
    if (p->unit == unit) ids.push_back(id);
  for (int id : ids) Finish(id);  // in issue order (map order = op id order)
}

void StepInterpreter::FinishAll() {
  while (!pending_.empty()) Finish(pending_.begin()->first);
}

StepResult StepInterpreter::Run(const std::vector<at::Tensor>& micro_batches) {
  if (static_cast<int64_t>(micro_batches.size()) != plan_.grad_accum)
    throw UserError("step needs " + std::to_string(plan_.grad_accum) + " micro-batches, got " +
                    std::to_string(micro_batches.size()));
  const int64_t vocab = model_.spec().vocab;
  inputs_.clear();
  targets_.clear();
  for (const auto& tokens : micro_batches) {
    if (tokens.dim() != 2 || tokens.size(0) != plan_.micro_batch || tokens.size(1) != plan_.seq_len + 1 ||
        tokens.scalar_type() != at::kLong)
      throw UserError("micro-batch must be int64 [" + std::to_string(plan_.micro_batch) + ", " +
                      std::to_string(plan_.seq_len + 1) + "], got " + tokens.toString() + " " +
                      c10::str(tokens.sizes()));
    if (tokens.device().is_cpu()) {
      // A few thousand ints: negligible next to the step. On the GPU an
      // out-of-range embedding index is a device assert that kills the run.
      const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
      if (lo < 0 || hi >= vocab)
        throw UserError("token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the model's vocabulary [0, " +
                        std::to_string(vocab) + ")");
    }
    at::Tensor on_device = tokens.to(device_, /*non_blocking=*/true);
    inputs_.push_back(on_device.narrow(1, 0, plan_.seq_len));
    targets_.push_back(on_device.narrow(1, 1, plan_.seq_len).reshape({-1}));
  }
  TORCH_CHECK(pending_.empty(), "a previous step left collectives in flight");
  for (auto& u : units_) u.ZeroGradients();
  activations_.clear();
  grad_flowing_.clear();
  loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  clipped_ = false;
  copy_of_unit_.clear();
  grad_norm_ = 0;

  StepResult result;
  result.lr = optimizer_.CurrentLearningRate();
  // Gathers are issued as early as their deps allow, not at their place in
  // the list: the list puts "all-gather unit u+1" after "forward unit u", and
  // a collective is ordered after the work already queued on the compute
  // stream, so issuing it in list order would serialise every gather behind
  // the forward before it. Issued early (once the release it waits for has
  // run), it overlaps that forward, as the simulator schedules it. Every rank
  // hoists the same gathers, so collectives stay in the same order on all.
  const int n = static_cast<int>(program_.ops.size());
  std::vector<char> done(n, 0);
  auto issue_gathers_ahead = [&](int from) {
    constexpr int kLookahead = 64;  // ops scanned; gathers are rate-limited by their deps anyway
    std::vector<char> unit_busy(units_.size(), 0);  // a unit with an op still to run before the gather
    for (int j = from; j < n && j < from + kLookahead; ++j) {
      const StepOp& g = program_.ops[j];
      if (done[j]) continue;
      bool ready = g.kind == OpKind::kAllGather && !unit_busy.at(g.unit);
      for (int dep : g.deps) ready = ready && done[dep];
      if (ready) {
        timer_->Start(g.id);
        Gather(g);
        timer_->Stop(g.id);
        done[j] = 1;
      } else if (g.unit >= 0) {
        unit_busy.at(g.unit) = 1;  // its buffer is still in use (or not yet released) before j
      }
    }
  };
  for (const StepOp& op : program_.ops) {
    if (done[op.id]) continue;  // a gather issued ahead
    // The collectives this op depends on must have landed first.
    for (int dep : op.deps) Finish(dep);
    timer_->Start(op.id);
    switch (op.kind) {
      case OpKind::kAllGather: Gather(op); break;
      case OpKind::kForward: Forward(op.unit, op.micro_batch); break;
      case OpKind::kRecompute: Recompute(op.unit, op.micro_batch); break;
      case OpKind::kBackward: Backward(op.unit, op.micro_batch); break;
      case OpKind::kRelease: units_.at(op.unit).ReleaseCompute(); break;
      case OpKind::kReduceScatter: ReduceScatter(op); break;
      case OpKind::kAllReduce:
        if (op.unit < 0) GradNorm();
        else AllReduceUnit(op);
        break;
      case OpKind::kOptimizerStep: {
        ClipOnce();  // no-op when the program's norm op ran
        FinishUnit(op.unit);
        FlatUnit& unit = units_.at(op.unit);
        optimizer_.Update(op.unit, unit.master(), unit.grad(), unit.compute_shard());
        // Without gathers in the program (no_shard) the compute copy is
        // resident and the optimizer step refreshes it.
        if (!program_gathers_) unit.GatherLocal();
        break;
      }
      case OpKind::kCopyToHost: CopyGradsToHost(op); break;
      case OpKind::kCpuOptimizerStep: CpuOptimizerStep(op); break;
      case OpKind::kCopyToDevice: CopyParamsToDevice(op); break;
    }
    timer_->Stop(op.id);
    done[op.id] = 1;
    issue_gathers_ahead(op.id + 1);
  }
  FinishAll();
  copies_->DeviceWaitAll();  // the next step's gathers read the compute shards copied up
  if (comms_.world != nullptr && comms_.world->size() > 1) {
    // The reported loss is the mean over every rank's tokens (equal counts).
    // Watched: the host blocks on it in Collect() / .item() below.
    std::shared_ptr<CollectiveWork> work = comms_.world->AllReduce(loss_sum_, "all-reduce step loss");
    if (comms_.watchdog != nullptr) comms_.watchdog->Watch(work, "all-reduce step loss", comms_.world->name());
    work->Wait();
    loss_sum_.div_(static_cast<double>(comms_.world->size()));
  }
  optimizer_.FinishStep();
  result.op_seconds = timer_->Collect();  // waits for the device
  result.loss = loss_sum_.item<double>() / static_cast<double>(plan_.grad_accum);
  result.grad_norm = grad_norm_;
  for (const StepOp& op : program_.ops) {
    const double s = op.id < static_cast<int>(result.op_seconds.size()) ? result.op_seconds[op.id] : 0.0;
    switch (op.kind) {
      case OpKind::kForward: result.forward_s += s; break;
      case OpKind::kRecompute: result.recompute_s += s; break;
      case OpKind::kBackward: result.backward_s += s; break;
      case OpKind::kOptimizerStep:
      case OpKind::kCpuOptimizerStep: result.optimizer_s += s; break;
      case OpKind::kAllReduce: (op.unit < 0 ? result.optimizer_s : result.comm_s) += s; break;
      default: result.comm_s += s; break;
    }
  }
  activations_.clear();
  inputs_.clear();
  targets_.clear();
  return result;
}

void StepInterpreter::Forward(int unit, int mb) {
  TORCH_CHECK(mb >= 0 && mb < static_cast<int>(inputs_.size()), "forward of micro-batch ", mb, " out of range");
  const auto& params = units_.at(unit).params();
  Activation a;
  switch (model_.unit_kind(unit)) {
    case UnitKind::kEmbedding: a.output = model_.EmbeddingForward(params, inputs_[mb]); break;
    case UnitKind::kBlock: {
      // A fresh leaf: this unit's graph stops here, and its .grad after
      // backward is exactly the gradient to hand to the unit below.
      a.input = activations_.at({unit - 1, mb}).output.detach().requires_grad_(true);
      const int layer = unit - 1;
      if (plan_.IsCheckpointed(layer)) {
        at::NoGradGuard no_grad;  // keep only the input; activations die here
        a.output = model_.BlockForward(layer, params, a.input, rope_);
      } else {
        a.output = model_.BlockForward(layer, params, a.input, rope_);
      }
      break;
    }
    case UnitKind::kHead: {
      a.input = activations_.at({unit - 1, mb}).output.detach().requires_grad_(true);
      at::Tensor normed = model_.FinalNorm(params, a.input);
      at::Tensor weight = model_.OutputWeight(params, units_.at(model_.embedding_unit()).params());
      a.output = ChunkedCrossEntropy(normed.reshape({-1, normed.size(-1)}), weight, targets_[mb],
                                     plan_.loss_chunk_tokens);
      loss_sum_ += a.output.detach();
      break;
    }
  }
  activations_[{unit, mb}] = std::move(a);
}

void StepInterpreter::Recompute(int unit, int mb) {
  Activation& a = activations_.at({unit, mb});
  a.output = model_.BlockForward(unit - 1, units_.at(unit).params(), a.input, rope_);
}

void StepInterpreter::Backward(int unit, int mb) {
  Activation& a = activations_.at({unit, mb});
  const UnitKind kind = model_.unit_kind(unit);
  // Unsharded gradient buffers exist from the backward that first writes
  // them to their reduce-scatter (the tied embedding's from the head's).
  units_.at(unit).MaterializeComputeGrad();
  if (kind == UnitKind::kHead && model_.spec().tied_embeddings)
    units_.at(model_.embedding_unit()).MaterializeComputeGrad();
  if (kind == UnitKind::kHead) {
    at::Tensor seed = at::full({}, 1.0 / static_cast<double>(plan_.grad_accum), a.output.options());
    torch::autograd::backward({a.output}, {seed});
  } else {
    // A checkpointed block whose program had no recompute op still needs its graph.
    if (kind == UnitKind::kBlock && !a.output.requires_grad()) Recompute(unit, mb);
    at::Tensor grad = grad_flowing_.at(mb);
    torch::autograd::backward({a.output}, {grad});
  }
  if (a.input.defined()) grad_flowing_[mb] = a.input.grad();
  else grad_flowing_.erase(mb);
  activations_.erase({unit, mb});  // frees this unit's graph and saved tensors
  // Unsharded: "reduce" = accumulate this micro-batch's gradient in fp32 now;
  // sharded units wait for their reduce-scatter op. (A tied embedding's
  // compute_grad also holds the head's contribution by now; it is reduced
  // with the embedding, whose backward comes last.)
  // The compute-dtype buffer is released: the next backward of this unit
  // materialises a zeroed one, so only units in backward hold one.
  if (!Sharded(unit)) units_.at(unit).ReduceGradientsLocal(/*release=*/true);
}

// ---------------------------------------------------------------------------
// Collectives

void StepInterpreter::Gather(const StepOp& op) {
  FlatUnit& unit = units_.at(op.unit);
  if (!Sharded(op.unit)) {
    unit.GatherLocal();  // one rank holds it all: the gather is a cast
    return;
  }
  unit.MaterializeCompute();
  std::shared_ptr<CollectiveWork> work = comms_.shard->AllGather(unit.compute_shard(), unit.compute(), op.name);
  Track(op.id, op.unit, std::move(work), nullptr, {}, op.name, comms_.shard);
}

void StepInterpreter::ReduceScatter(const StepOp& op) {
  FlatUnit& unit = units_.at(op.unit);
  if (!Sharded(op.unit)) return;  // reduced locally right after the backward
  at::NoGradGuard no_grad;
  const at::ScalarType reduce = plan_.reduce_dtype == DType::kBF16 ? at::kBFloat16 : at::kFloat;
  // A private copy in the reduce dtype: the collective reads it while the
  // unsharded buffer's bytes go back to the allocator and the next backward
  // gets fresh zeroed ones.
  at::Tensor full = unit.compute_grad().to(reduce, /*non_blocking=*/false, /*copy=*/true);
  unit.ReleaseComputeGrad();
  at::Tensor shard = at::empty({unit.shard_numel()}, full.options());
  std::shared_ptr<CollectiveWork> work = comms_.shard->ReduceScatter(full, shard, op.name);
  const double scale = 1.0 / static_cast<double>(unit.group_size());
  at::Tensor grad = unit.grad();
  Track(op.id, op.unit, std::move(work), [grad, shard, scale]() mutable { grad.add_(shard, scale); }, {full, shard},
        op.name, comms_.shard);
}

void StepInterpreter::AllReduceUnit(const StepOp& op) {
  if (comms_.replica == nullptr || comms_.replica->size() == 1) return;
  FinishUnit(op.unit);  // the grad shard holds every micro-batch's reduction
  at::Tensor grad = units_.at(op.unit).grad();
  std::shared_ptr<CollectiveWork> work = comms_.replica->AllReduce(grad, op.name);
  const double scale = 1.0 / static_cast<double>(comms_.replica->size());
  Track(op.id, op.unit, std::move(work), [grad, scale]() mutable { grad.mul_(scale); }, {}, op.name,
        comms_.replica);
}

void StepInterpreter::GradNorm() {
  FinishAll();
  std::vector<at::Tensor> grads;
  for (auto& u : units_) grads.push_back(u.grad());
  at::Tensor sum_sq = AdamW::SumOfSquares(grads);
  if (comms_.shard != nullptr && comms_.shard->size() > 1) {
    // Each shard once: replicas hold identical shards (see the header).
    sum_sq = sum_sq.reshape({1}).contiguous();
    // Watched like every other collective: the host blocks in .item() below,
    // so a hang here must not be silent.
    std::shared_ptr<CollectiveWork> work = comms_.shard->AllReduce(sum_sq, "all-reduce grad norm");
    if (comms_.watchdog != nullptr) comms_.watchdog->Watch(work, "all-reduce grad norm", comms_.shard->name());
    work->Wait();
  }
  grad_norm_ = std::sqrt(sum_sq.sum().item<double>());
  optimizer_.ClipToNorm(grads, grad_norm_);
  clipped_ = true;
}

// ---------------------------------------------------------------------------
// Offloaded optimizer

void StepInterpreter::CopyGradsToHost(const StepOp& op) {
  TORCH_CHECK(offload_, "copy to host in a program without offload");
  FinishUnit(op.unit);
  at::Tensor src = units_.at(op.unit).grad();
  at::Tensor dst = host_grads_.at(op.unit);
  copies_->Run(op.stream, op.id, [&] { dst.copy_(src, /*non_blocking=*/true); });
  copy_of_unit_[op.unit] = op.id;
}

void StepInterpreter::CpuOptimizerStep(const StepOp& op) {
  TORCH_CHECK(offload_, "CPU optimizer step in a program without offload");
  ClipOnce();
  auto it = copy_of_unit_.find(op.unit);
  TORCH_CHECK(it != copy_of_unit_.end(), "cpu adamw of unit ", op.unit, " before its gradients were copied down");
  copies_->HostWait(it->second);  // the host reads the copy: block on that one event only
  FlatUnit& unit = units_.at(op.unit);
  optimizer_.Update(op.unit, unit.master(), host_grads_.at(op.unit), host_compute_.at(op.unit));
}

void StepInterpreter::CopyParamsToDevice(const StepOp& op) {
  TORCH_CHECK(offload_, "copy to device in a program without offload");
  FlatUnit& unit = units_.at(op.unit);
  at::Tensor src = host_compute_.at(op.unit);
  at::Tensor dst = unit.compute_shard();
  copies_->Run(op.stream, op.id, [&] { dst.copy_(src, /*non_blocking=*/true); });
  if (!program_gathers_) {
    // no_shard: the resident compute copy is refreshed from the shard.
    copies_->DeviceWait(op.id);
    unit.GatherLocal();
  }
}

void StepInterpreter::ClipOnce() {
  if (clipped_) return;
  GradNorm();
}

}  // namespace llmplan::executor
