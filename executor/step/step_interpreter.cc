// StepInterpreter (see step_interpreter.h).
//
// How each op kind runs (S = the unit's shard group size, R = its replicas; an
// edge unit kept whole by replicate_edges has S = 1 on every rank):
//   all-gather      S > 1: the compute-dtype shard all-gathered on the shard
//                   group's gather communicator into the unit's compute buffer
//                   (allocated at issue) — or, for a unit that keeps no
//                   compute shard (cast at gather), a cast of the master made
//                   on a side stream just before; S = 1: the fp32 master cast
//                   into it.
//   forward         the unit on the previous unit's output, detached (a fresh
//                   leaf), so each unit's autograd graph ends at its own input;
//                   under NoGradGuard when the program recomputes it later.
//   recompute       the block's forward again, with grad.
//   backward        torch::autograd::backward on that unit alone into its
//                   compute-dtype gradient buffer (the head's from the loss,
//                   seeded with 1 / grad_accum); S > 1: then the gradient is
//                   cast to the reduce dtype (the reduce-scatter's private
//                   input) and the compute-dtype buffer released.
//   release         the gathered buffer's bytes back to the allocator.
//   reduce-scatter  that copy, on the shard group's reduction communicator,
//                   into a temporary shard.
//   accumulate      the compute stream waits for it; grad += shard / S
//                   (x gradient_scale); the temporaries are dropped.
//   reduce-local    S = 1: grad += compute-dtype gradient (x gradient_scale),
//                   the latter released.
//   all-reduce      a unit's fp32 gradient summed over the replica group (it
//                   was pre-scaled by 1/R, so the sum is the mean) — over the
//                   world for an edge unit kept whole (replicate_edges).
//   grad norm / all-reduce grad norm / clip
//                   sum of squares of this rank's shards, summed over the shard
//                   group only (replicas hold identical shards; a unit kept
//                   whole counts on the group's first rank only), read on the
//                   host, gradients scaled when above the limit.
//   all-reduce step loss  over the world: the reported loss is the job's mean.
//   adamw           the fused update of the unit's fp32 shard, writing the
//                   compute-dtype shard the next gathers send.
//   d2h grads / cpu adamw / h2d params   the offloaded optimizer: a step's
//                   gradient shards stay unclipped (clip only reads the
//                   norm) and are applied in the NEXT Run, beside its first
//                   forward, by the threaded CPU AdamW (cpu_adamw.h) with
//                   that step's learning rate and clipping factor, writing
//                   pinned compute-dtype staging that is copied up into the
//                   compute shard. Where the gradient waits
//                   (OffloadLayout): staged per unit, each is copied
//                   on its own stream into the unit's pinned host buffer in
//                   its step's backward, right after its last reduction;
//                   through the slots it stays in the unit's fp32 gradient
//                   and the next Run copies it into pinned slot
//                   u % kOffloadStagingSlots beside the update of the unit
//                   before. The run's first step (and the step after
//                   FinishUpdate) has nothing to apply: its cpu adamw and
//                   h2d params ops (and, through the slots, its d2h grads)
//                   run as no-ops.
//   h2d master / adamw / d2h master   offload params: the fp32 master lives in
//                   pinned host memory; a device copy of it exists only from
//                   its h2d op to its d2h op, around the GPU AdamW.
//   h2d params (before a gather)      offload optimizer+params: the
//                   compute-dtype shard lives in pinned host memory (the CPU
//                   AdamW writes it there) and is copied into a device buffer
//                   just ahead of each gather, which sends it (or, on one GPU,
//                   copies it into the compute buffer) and drops it.
#include "executor/step/step_interpreter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

#include "executor/comm/collective_watchdog.h"
#include "executor/comm/communicator.h"
#include "executor/data/micro_batch.h"
#include "executor/hardware/host_memory.h"
#include "executor/model/chunked_cross_entropy.h"
#include "executor/step/out_of_memory.h"
#include "executor/step/step_graph.h"
#include "executor/sharding/shard_model.h"
#include "executor/torch_compat.h"
#include "base/user_error.h"

#ifdef LLMPLAN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace llmplan::executor {

namespace {

// The test hook of a run made slow on purpose (the in-run prediction check,
// tests/executor/learn_cli_test.cc): LLMPLAN_TEST_SLOW_OPTIMIZER_S=SECONDS
// makes every optimizer op (the device's AdamW and the offloaded one on the
// host) take that much longer on the host. Unset: nothing.
void MaybeDelayForTest(const StepOp&) {
  static const double seconds = [] {
    const char* text = std::getenv("LLMPLAN_TEST_SLOW_OPTIMIZER_S");
    return text == nullptr ? 0.0 : std::atof(text);
  }();
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// One pass over a CPU micro-batch on the calling thread: whether any token
// carries a flag above its id (executor/data/micro_batch.h), and the
// smallest and largest id. Not ATen's ops: on a CPU tensor of more than
// 32,768 elements (ATen's grain size) they run on the OpenMP pool, whose
// threads have gone to sleep while the host spent the step before issuing
// kernels; waking them took 5 to 38 ms before some steps of a 100 ms step
// of the SmolLM2-135M shape on an H100 (16 x 2,049 tokens: OMP_NUM_THREADS=1
// made it 9.6% faster; the 1B plan's 4 x 4,097 stayed under the grain), for
// ints one core reads in microseconds.
struct TokenScan {
  bool flagged = false;
  int64_t lo = 0, hi = 0;
};
TokenScan ScanTokens(const at::Tensor& batch) {
  const at::Tensor tokens = batch.contiguous();
  const int64_t* p = tokens.data_ptr<int64_t>();
  const int64_t n = tokens.numel();
  TokenScan scan;
  if (n == 0) return scan;
  int64_t raw_lo = p[0], raw_hi = p[0], id_lo = p[0] & kTokenIdMask, id_hi = id_lo;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = p[i];
    scan.flagged |= v >= kDocumentStart;
    raw_lo = std::min(raw_lo, v);
    raw_hi = std::max(raw_hi, v);
    id_lo = std::min(id_lo, v & kTokenIdMask);
    id_hi = std::max(id_hi, v & kTokenIdMask);
  }
  // A negative id is below kDocumentStart (no flag): it stays negative.
  scan.lo = scan.flagged ? std::min(id_lo, raw_lo) : raw_lo;
  scan.hi = scan.flagged ? id_hi : raw_hi;
  return scan;
}

// A flagged CPU micro-batch [rows, seq_len + 1], read once on the calling
// thread (ScanTokens says why not with ATen): its token ids without their
// flags, and the rows of the flattened targets that train, undefined when no
// token is marked untrained — by a loss mask, or, with documents, as a
// document's first token.
struct UnflaggedBatch {
  at::Tensor ids;
  at::Tensor trained_rows;
};
UnflaggedBatch Unflag(const at::Tensor& batch, bool documents) {
  const at::Tensor in = batch.contiguous();
  const int64_t rows = in.size(0), cols = in.size(1), seq_len = cols - 1;
  UnflaggedBatch out{at::empty_like(in), at::Tensor()};
  const int64_t* p = in.data_ptr<int64_t>();
  int64_t* ids = out.ids.data_ptr<int64_t>();
  const int64_t untrained_bits = kUntrainedTarget | (documents ? kDocumentStart : 0);
  bool any_untrained = false;
  std::vector<int64_t> trained;
  trained.reserve(static_cast<size_t>(rows * seq_len));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t v = p[r * cols + c];
      ids[r * cols + c] = v & kTokenIdMask;
      const bool untrained = (v & untrained_bits) != 0;
      any_untrained |= untrained;
      if (c > 0 && !untrained) trained.push_back(r * seq_len + c - 1);  // column c is the target of position c - 1
    }
  }
  if (any_untrained) {
    out.trained_rows = at::empty({static_cast<int64_t>(trained.size())}, at::TensorOptions().dtype(at::kLong));
    std::copy(trained.begin(), trained.end(), out.trained_rows.data_ptr<int64_t>());
  }
  return out;
}

// Which of a CPU micro-batch's first `seq_len` columns begin a document
// (kDocumentStart), as a bool [rows, seq_len] tensor, read on the calling
// thread for the reason ScanTokens gives.
at::Tensor DocumentStarts(const at::Tensor& batch, int64_t seq_len) {
  const at::Tensor in = batch.contiguous();
  const int64_t rows = in.size(0), cols = in.size(1);
  at::Tensor starts = at::empty({rows, seq_len}, at::TensorOptions().dtype(at::kBool));
  const int64_t* p = in.data_ptr<int64_t>();
  bool* out = starts.data_ptr<bool>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < seq_len; ++t) out[r * seq_len + t] = (p[r * cols + t] & kDocumentStart) != 0;
  return starts;
}

}  // namespace

// ---------------------------------------------------------------------------
// Collectives in flight and copy streams

struct StepInterpreter::Pending {
  Communicator* group = nullptr;  // its stream: collectives of one communicator run in issue order
  std::shared_ptr<CollectiveWork> work;
  std::vector<at::Tensor> keep_alive;  // temporaries it reads or writes
};

// Offload copies on their own streams (CUDA): a copy waits for the compute
// stream's work so far with an event (the host never blocks to order it), and
// records its own completion event; the CPU optimizer blocks the host only on
// the one copy it needs. On the CPU copies are synchronous memcpys.
class StepInterpreter::CopyStreams {
 public:
  explicit CopyStreams(const at::Device& d) : device_(d) {
#ifdef LLMPLAN_WITH_CUDA
    if (device_.is_cuda()) {
      to_host_.emplace(c10::cuda::getStreamFromPool(false, device_.index()));
      to_device_.emplace(c10::cuda::getStreamFromPool(false, device_.index()));
      gather_cast_.emplace(c10::cuda::getStreamFromPool(false, device_.index()));
    }
#endif
  }
  // Runs `copy` as op `op` on the stream for `kind`, after the current
  // stream's queued work, measured on that stream.
  void Run(StreamKind kind, int op, StepRecorder& recorder, const std::function<void()>& copy) {
#ifdef LLMPLAN_WITH_CUDA
    if (device_.is_cuda()) {
      Within(kind, [&] {
        recorder.Start(op, StepRecorder::Where::kCurrentStream);
        copy();
        recorder.Stop(op, StepRecorder::Where::kCurrentStream);
        auto done = std::make_unique<at::cuda::CUDAEvent>();
        done->record(at::cuda::getCurrentCUDAStream(device_.index()));  // the copy stream
        events_[op] = std::move(done);
      });
      return;
    }
#endif
    (void)kind;
    recorder.Start(op, StepRecorder::Where::kHost);
    copy();
    recorder.Stop(op, StepRecorder::Where::kHost);
  }
  // Runs `work` with the copy stream for `kind` current (kGather: the casts
  // cast_at_gather sends), after the current stream's queued work: a
  // collective issued there waits for the copies queued on that stream, not
  // for the compute stream's.
  void Within(StreamKind kind, const std::function<void()>& work) {
#ifdef LLMPLAN_WITH_CUDA
    if (device_.is_cuda()) {
      c10::cuda::CUDAStream stream = kind == StreamKind::kDeviceToHost ? *to_host_
                                     : kind == StreamKind::kGather     ? *gather_cast_
                                                                       : *to_device_;
      at::cuda::CUDAEvent ready;
      ready.record(at::cuda::getCurrentCUDAStream(device_.index()));
      ready.block(stream);
      c10::cuda::CUDAStreamGuard guard(stream);
      work();
      return;
    }
#endif
    (void)kind;
    work();
  }
  bool IsCopy(int op) const {
#ifdef LLMPLAN_WITH_CUDA
    return events_.count(op) > 0;
#else
    (void)op;
    return false;
#endif
  }
  // The host waits for copy `op` (the CPU optimizer reads its result).
  void HostWait(int op) {
#ifdef LLMPLAN_WITH_CUDA
    auto it = events_.find(op);
    if (it != events_.end()) it->second->synchronize();
#else
    (void)op;
#endif
  }
  // The current stream waits for copy `op` (no host block).
  void DeviceWait(int op) {
#ifdef LLMPLAN_WITH_CUDA
    auto it = events_.find(op);
    if (it != events_.end()) it->second->block(at::cuda::getCurrentCUDAStream(device_.index()));
#else
    (void)op;
#endif
  }
  // The current stream waits for every copy of the step (the next step's
  // gathers read the compute shards copied up).
  void DeviceWaitAll() {
#ifdef LLMPLAN_WITH_CUDA
    for (auto& [id, event] : events_) event->block(at::cuda::getCurrentCUDAStream(device_.index()));
    events_.clear();
#endif
  }

 private:
  at::Device device_;
#ifdef LLMPLAN_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> to_host_, to_device_, gather_cast_;
  std::map<int, std::unique_ptr<at::cuda::CUDAEvent>> events_;
#endif
};

// ---------------------------------------------------------------------------
// Set-up

StepInterpreter::StepInterpreter(StepProgram program, const LlamaModel& model, std::vector<FlatUnit>& units,
                                 AdamW& optimizer, const at::Device& device, StepComms comms)
    : model_(model),
      units_(units),
      optimizer_(optimizer),
      program_(std::move(program)),
      device_(device),
      comms_(comms),
      offload_(program_.offload.optimizer_on_host),
      params_on_host_(program_.offload.master_on_host),
      stages_every_unit_(program_.offload.staged_per_unit),
      step_recorder_(std::make_unique<StepRecorder>(device, std::max<int>(1, static_cast<int>(program_.ops.size())))),
      recorder_(step_recorder_.get()),
      copies_(std::make_unique<CopyStreams>(device)) {
  const int S = program_.shard_group_size, R = program_.replica_groups;
  auto group_ok = [](Communicator* c, int size) { return size == 1 ? (c == nullptr || c->size() == 1) : (c && c->size() == size); };
  if (!group_ok(comms_.shard, S) || !group_ok(comms_.shard_reduce, S) || !group_ok(comms_.replica, R))
    throw UserError("plan for " + std::to_string(program_.gpus) + " GPUs (shard groups of " + std::to_string(S) + ", " +
                    std::to_string(R) + " replica groups) but this process was given " +
                    (comms_.shard ? std::to_string(comms_.shard->size()) : std::string("no")) + " x " +
                    (comms_.replica ? std::to_string(comms_.replica->size()) : std::string("no")) +
                    " ranks: start one process per GPU (llmplan run launches them; torchrun and srun work too)");
  if (static_cast<int>(units.size()) != model.num_units() ||
      static_cast<int>(program_.units.size()) != model.num_units())
    throw UserError("step program has " + std::to_string(program_.units.size()) + " units, the model " +
                    std::to_string(model.num_units()));
  for (int u = 0; u < model.num_units(); ++u) {
    TORCH_CHECK(units[u].group_size() == program_.units[u].group_size &&
                    units[u].padded_numel() == program_.units[u].padded_params,
                "unit ", u, " was not made for this plan's shard group of ", program_.units[u].group_size);
    TORCH_CHECK(units[u].master_on_host() == (offload_ || params_on_host_), "unit ", u,
                " master placement does not match the plan's offload");
    TORCH_CHECK(units[u].compute_shard_on_host() == (offload_ && params_on_host_), "unit ", u,
                " compute shard placement does not match the plan's offload");
  }
  for (const auto& op : program_.ops) {
    if (op.kind == OpKind::kRecompute) recomputed_.insert({op.unit, op.micro_batch});
    TORCH_CHECK(op.group != CommGroup::kWorld || program_.gpus == 1 || comms_.world != nullptr,
                "op \"", op.name, "\" needs the world communicator");
  }
  if (offload_) {
    // The host staging the program's copies and updates use
    // (OffloadLayout): a buffer per unit, or slots the size of the largest
    // unit's shard that the units take in turn. Unit u's is buffer
    // u % buffers either way (HostGradFor).
    int64_t largest = 0;
    for (const auto& unit : units_) largest = std::max(largest, unit.shard_numel());
    TORCH_CHECK(program_.offload.staging_buffers >= 1, "an offloaded optimizer's program without host staging");
    for (int k = 0; k < program_.offload.staging_buffers; ++k) {
      const int64_t numel = stages_every_unit_ ? units_[k].shard_numel() : largest;
      host_grads_.push_back(PinnedHostZeros(numel, at::kFloat));
      // With the parameters streamed, each unit's own compute shard is on the
      // host already: the CPU update writes it there, no staging needed.
      if (!params_on_host_) host_compute_.push_back(PinnedHostZeros(numel, units_[k].compute_dtype()));
    }
  }
  for (const auto& op : program_.ops) captured_ops_ += op.captured;
#ifdef LLMPLAN_WITH_CUDA
  if (program_.cuda_graph && device_.is_cuda()) graph_ = std::make_unique<StepGraph>(device_);
#endif
  window_ = WindowLayout(model.MakeRopeTable(program_.seq_len, device, ScalarTypeOf(program_.compute_dtype)));
  document_mask_ = program_.document_attention &&
                   !compat::DocumentAttentionUsesFlash(device, ScalarTypeOf(program_.compute_dtype), model.spec().head_dim);
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

Communicator* StepInterpreter::GroupFor(const StepOp& op) const {
  switch (op.group) {
    case CommGroup::kShard: return op.stream == StreamKind::kGather ? comms_.shard : comms_.shard_reduce;
    case CommGroup::kReplica: return comms_.replica;
    case CommGroup::kWorld: return comms_.world;
    case CommGroup::kNone: return nullptr;
  }
  return nullptr;
}

void StepInterpreter::Track(const StepOp& op, std::shared_ptr<CollectiveWork> work, Communicator* group,
                            std::vector<at::Tensor> keep_alive) {
  if (comms_.watchdog != nullptr) comms_.watchdog->Watch(work, op.name, group->name());
  recorder_->Collective(op.id, work);
  auto p = std::make_unique<Pending>();
  p->group = group;
  p->work = std::move(work);
  p->keep_alive = std::move(keep_alive);
  pending_[op.id] = std::move(p);
}

void StepInterpreter::FinishThrough(int op_id) {
  auto it = pending_.find(op_id);
  if (it == pending_.end()) return;
  Communicator* group = it->second->group;
  // In issue order (map order = op id order): the communicator's stream ran
  // them in that order, so waiting on the last one covers the earlier ones.
  for (auto p = pending_.begin(); p != pending_.end() && p->first <= op_id;) {
    if (p->second->group != group) {
      ++p;
      continue;
    }
    p->second->work->Wait();
    p = pending_.erase(p);
  }
}

void StepInterpreter::WaitForDeps(const StepOp& op) {
  const bool host_work = op.stream == StreamKind::kCpu;
  // A gather of streamed parameters is issued on the copy stream behind the
  // copy it reads (Gather): the compute stream must not wait for that copy
  // here, at the gather's early place in issue order, or it would stall on
  // every prefetch (measured: 1 s of a 3.5 s step for Llama-3.2-3B).
  const bool streamed_gather = op.kind == OpKind::kAllGather && units_.at(op.unit).compute_shard_on_host();
  for (int dep : op.deps) {
    if (pending_.count(dep) > 0) FinishThrough(dep);
    else if (host_work) copies_->HostWait(dep);
    else if (copies_->IsCopy(dep) && !streamed_gather) copies_->DeviceWait(dep);
  }
}

// ---------------------------------------------------------------------------
// The step

void StepInterpreter::LoadBatches(const std::vector<at::Tensor>& micro_batches, int64_t expected, bool into_graph) {
  if (static_cast<int64_t>(micro_batches.size()) != expected)
    throw UserError("step needs " + std::to_string(expected) + " micro-batches, got " +
                    std::to_string(micro_batches.size()));
  const int64_t vocab = model_.spec().vocab;
  inputs_.clear();
  targets_.clear();
  trained_rows_.clear();
  loss_denominator_.clear();
  spans_.clear();
  layouts_.clear();
  int64_t trained_total = 0;
  bool masked = false;
  for (const auto& batch : micro_batches) {
    if (batch.dim() != 2 || batch.size(0) != program_.micro_batch || batch.size(1) != program_.seq_len + 1 ||
        batch.scalar_type() != at::kLong)
      throw UserError("micro-batch must be int64 [" + std::to_string(program_.micro_batch) + ", " +
                      std::to_string(program_.seq_len + 1) + "], got " + batch.toString() + " " +
                      c10::str(batch.sizes()));
    at::Tensor tokens = batch;
    at::Tensor rows;  // the trained targets' rows, when a loss mask leaves some out
    if (program_.document_attention) {
      // The pieces each row's document starts cut it into, found on the host.
      const at::Tensor host = batch.device().is_cpu() ? batch : batch.cpu();
      spans_.push_back(FindDocumentSpans(DocumentStarts(host, program_.seq_len), device_.is_cuda()));
    }
    if (batch.device().is_cpu()) {
      // The bits above the ids (micro_batch.h) off, and under a loss mask the
      // trained targets listed on the host, so the device never syncs to
      // count them.
      const TokenScan scan = ScanTokens(batch);
      if (scan.flagged) {
        // With documents, a document's first token is no target either: it
        // would be predicted from the document before it, which nothing of
        // it attends to (as when each document is a sequence of its own).
        UnflaggedBatch unflagged = Unflag(batch, program_.document_attention);
        tokens = std::move(unflagged.ids);
        rows = std::move(unflagged.trained_rows);
        masked = masked || rows.defined();
      }
      // On the GPU an out-of-range embedding index is a device assert that
      // kills the run.
      const int64_t lo = scan.lo, hi = scan.hi;
      if (lo < 0 || hi >= vocab)
        throw UserError("token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the model's vocabulary [0, " +
                        std::to_string(vocab) + ")");
    }
    trained_total += rows.defined() ? rows.numel() : program_.micro_batch * program_.seq_len;
    if (into_graph) {
      // The graph reads each micro-batch's tokens where the capture found
      // them: every step's are copied into those buffers.
      if (rows.defined() || !spans_.empty())
        throw UserError("this plan replays its step as a CUDA graph, which needs batches of one shape, and this batch "
                        "has a loss mask or document starts: plan again with --cuda-graph no");
      const size_t i = inputs_.size();
      if (graph_tokens_.size() <= i) {
        graph_tokens_.push_back(at::empty(tokens.sizes(), tokens.options().device(device_)));
        graph_targets_.push_back(at::empty({program_.micro_batch * program_.seq_len}, graph_tokens_[i].options()));
      }
      graph_tokens_[i].copy_(tokens, /*non_blocking=*/true);
      // The targets are a copy (a strided window flattened), made into the
      // buffer the graph reads them from, not into a fresh tensor.
      graph_targets_[i].view({program_.micro_batch, program_.seq_len}).copy_(graph_tokens_[i].narrow(1, 1, program_.seq_len));
      inputs_.push_back(graph_tokens_[i].narrow(1, 0, program_.seq_len));
      targets_.push_back(graph_targets_[i]);
      trained_rows_.push_back(rows);
      continue;
    }
    const at::Tensor on_device = tokens.to(device_, /*non_blocking=*/true);
    inputs_.push_back(on_device.narrow(1, 0, program_.seq_len));
    targets_.push_back(on_device.narrow(1, 1, program_.seq_len).reshape({-1}));
    trained_rows_.push_back(rows.defined() ? rows.to(device_, /*non_blocking=*/true) : rows);
  }
  // The loss is the mean over the step's trained targets: each micro-batch's
  // sum divided by their count over the micro-batches (times the count of
  // micro-batches, which the step's mean divides by again). Without a mask:
  // 0, the plain mean of each (the same arithmetic as ever).
  const double per_micro_batch = static_cast<double>(std::max<int64_t>(trained_total, 1)) / static_cast<double>(expected);
  loss_denominator_.assign(micro_batches.size(), masked ? per_micro_batch : 0.0);
}

void StepInterpreter::Issue(const StepProgram& program, const StepOp& op, int rank) {
  recorder_->BeforeIssue(op.id);
  WaitForDeps(op);
  try {
    MaybeInjectOutOfMemory(rank, op.id, device_);
    Perform(op);
  } catch (const c10::Error& e) {
    if (!compat::IsOutOfMemory(e)) throw;
    const compat::MemoryStats stats = compat::ReadMemoryStats(device_, ProcessPeakRssBytes());
    throw OutOfMemoryError(program, op, rank, device_, MemoryAtFailure{stats.allocated, stats.reserved},
                           out_of_memory_advice_);
  }
  recorder_->AfterIssue(op.id);
}

StepResult StepInterpreter::Run(const std::vector<at::Tensor>& micro_batches) {
  // The step's CUDA graph (StepProgram::cuda_graph): the first Run issues
  // every op (cuBLAS, cuDNN and the allocator warm up outside the graph), the
  // second captures the captured ops and launches them, every later Run
  // launches the graph.
  const bool graph_step = Graphed() && runs_ >= 1;
  const bool replay = graph_step && GraphCaptured();
  // Before the capture, the warm-up step's cached blocks go back to the
  // driver: the graph's pool makes segments of its own, and blocks no
  // allocation outside the graph would reuse would stay reserved beside
  // them (simulator/reserved_memory.cc does the same).
  if (graph_step && !replay) compat::ReleaseCachedMemory(device_);
  LoadBatches(micro_batches, program_.micro_batches, graph_step);
  TORCH_CHECK(pending_.empty(), "a previous step left collectives in flight");
  // Each unit's first reduction this step writes its gradient shard (no
  // zeroing pass over the fp32 gradients first). A replay leaves the
  // gradients' flags as the capture set them, and the norm's inputs where
  // the graph writes them.
  if (!replay) {
    for (auto& u : units_) u.StartGradients();
    grad_square_sum_.clear();
    norm_sq_ = at::Tensor();
  }
  activations_.clear();
  grad_flowing_.clear();
  reduce_input_.clear();
  reduced_shard_.clear();
  param_staging_.clear();
  master_staging_.clear();
  if (graph_step) {
    // Where the graph writes the step's loss (zeroed inside it).
    if (!graph_loss_.defined()) graph_loss_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
    loss_sum_ = graph_loss_;
  } else {
    loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));
  }
  grad_norm_ = 0;
  skip_update_ = false;
  clip_scale_ = 1;
  applying_ = std::exchange(next_update_, std::nullopt);
  executed_.clear();

  StepResult result;
  result.lr = optimizer_.CurrentLearningRate();
  recorder_->BeginStep();
  // The whole step: every op of the program, in its order (step_program.h),
  // the captured ones as the graph.
  const int rank = comms_.world != nullptr ? comms_.world->rank() : 0;
  size_t next = 0;
  if (graph_step) {
    RunGraph(rank, replay);
    next = captured_ops_;
  }
  for (; next < program_.ops.size(); ++next) {
    Issue(program_, program_.ops[next], rank);
    executed_.push_back(program_.ops[next].id);
  }
  recorder_->AllIssued();
  // Nothing is left in flight but what no op waited for (the step's loss).
  while (!pending_.empty()) FinishThrough(pending_.rbegin()->first);
  copies_->DeviceWaitAll();
  // This step's own update, which the next Run (or FinishUpdate) applies.
  if (offload_ && !skip_update_) next_update_ = optimizer_.NextScalars(clip_scale_);
  optimizer_.FinishStep();
  result.measurement = recorder_->Finish();  // waits for the device
  const double ranks = comms_.world != nullptr ? comms_.world->size() : 1;
  result.loss = loss_sum_.item<double>() / ranks / static_cast<double>(program_.micro_batches);
  result.grad_norm = grad_norm_;
  result.update_skipped = skip_update_;
  result.executed = executed_;
  for (const StepOp& op : program_.ops) {
    const OpMeasurement& m = result.measurement.ops[op.id];
    const double s = m.end_s - m.start_s;
    switch (op.kind) {
      case OpKind::kForward: result.forward_s += s; break;
      case OpKind::kRecompute: result.recompute_s += s; break;
      case OpKind::kBackward:
      case OpKind::kAccumulateShard:
      case OpKind::kLocalReduce: result.backward_s += s; break;
      case OpKind::kGradNorm:
      case OpKind::kClipGradients:
      case OpKind::kOptimizerStep:
      case OpKind::kCpuOptimizerStep: result.optimizer_s += s; break;
      default: result.comm_s += s; break;
    }
  }
  activations_.clear();
  inputs_.clear();
  targets_.clear();
  ++runs_;
  result.measurement.returned_s = recorder_->HostSeconds();
  return result;
}

bool StepInterpreter::Graphed() const {
#ifdef LLMPLAN_WITH_CUDA
  return graph_ != nullptr;
#else
  return false;
#endif
}

bool StepInterpreter::GraphCaptured() const {
#ifdef LLMPLAN_WITH_CUDA
  return graph_ != nullptr && graph_->captured();
#else
  return false;
#endif
}

void StepInterpreter::RunGraph(int rank, bool replay) {
#ifdef LLMPLAN_WITH_CUDA
  if (!replay) {
    // Issued as in any step, measured as in any step (the marks become
    // nodes of the graph), but nothing runs until the launch below.
    graph_->Capture([&] {
      loss_sum_.zero_();
      for (size_t i = 0; i < captured_ops_; ++i) {
        Issue(program_, program_.ops[i], rank);
        executed_.push_back(program_.ops[i].id);
      }
    });
    captured_memory_.clear();
    for (size_t i = 0; i < captured_ops_; ++i) captured_memory_.push_back(recorder_->Measured(program_.ops[i].id));
  } else {
    for (size_t i = 0; i < captured_ops_; ++i) executed_.push_back(program_.ops[i].id);
  }
  graph_->Replay();
  if (replay)
    for (size_t i = 0; i < captured_ops_; ++i) recorder_->Replayed(program_.ops[i].id, captured_memory_[i]);
#else
  (void)rank;
  (void)replay;
  TORCH_CHECK(false, "a CUDA graph step in a build without CUDA");
#endif
}

EvaluationResult StepInterpreter::Evaluate(const StepProgram& evaluation,
                                          const std::vector<at::Tensor>& micro_batches) {
  TORCH_CHECK(evaluation.evaluation && evaluation.units.size() == program_.units.size() &&
                  evaluation.micro_batch == program_.micro_batch && evaluation.seq_len == program_.seq_len &&
                  evaluation.loss_chunk_tokens == program_.loss_chunk_tokens,
              "Evaluate needs an evaluation program built from this step program's plan (BuildEvaluationProgram)");
  // The parameters of the last finished step: an offloaded update still
  // pending is applied now instead of beside the next step's first forward
  // (the same values either way, as before a checkpoint).
  FinishUpdate();
  LoadBatches(micro_batches, evaluation.micro_batches, /*into_graph=*/false);
  TORCH_CHECK(pending_.empty(), "a previous step left collectives in flight");
  if (!eval_recorder_ || eval_ops_ != evaluation.ops.size()) {
    eval_recorder_ = std::make_unique<StepRecorder>(device_, std::max<int>(1, static_cast<int>(evaluation.ops.size())));
    eval_ops_ = evaluation.ops.size();
  }
  // Back to the step's recorder and state however this ends.
  struct Restore {
    StepInterpreter* self;
    ~Restore() {
      self->recorder_ = self->step_recorder_.get();
      self->evaluating_ = false;
      self->eval_hidden_.clear();
      self->param_staging_.clear();
      self->inputs_.clear();
      self->targets_.clear();
    }
  } restore{this};
  recorder_ = eval_recorder_.get();
  evaluating_ = true;
  eval_hidden_.clear();
  param_staging_.clear();
  loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_));

  EvaluationResult result;
  recorder_->BeginStep();
  const int rank = comms_.world != nullptr ? comms_.world->rank() : 0;
  for (const StepOp& op : evaluation.ops) {
    TORCH_CHECK(op.kind == OpKind::kAllGather || op.kind == OpKind::kCopyParamsForGather ||
                    op.kind == OpKind::kForward || op.kind == OpKind::kRelease || op.kind == OpKind::kAllReduceLoss,
                "op \"", op.name, "\" has no place in an evaluation");
    Issue(evaluation, op, rank);
  }
  while (!pending_.empty()) FinishThrough(pending_.rbegin()->first);
  copies_->DeviceWaitAll();
  result.measurement = recorder_->Finish();  // waits for the device
  const double ranks = comms_.world != nullptr ? comms_.world->size() : 1;
  result.loss = loss_sum_.item<double>() / ranks / static_cast<double>(evaluation.micro_batches);
  return result;
}

void StepInterpreter::Perform(const StepOp& op) {
  using Where = StepRecorder::Where;
  // Compute-stream work, measured on the compute stream.
  auto on_compute = [&](const std::function<void()>& work) {
    recorder_->Start(op.id, Where::kCurrentStream);
    work();
    recorder_->Stop(op.id, Where::kCurrentStream);
  };
  switch (op.kind) {
    case OpKind::kAllGather: Gather(op); break;
    case OpKind::kForward: on_compute([&] { Forward(op.unit, op.micro_batch); }); break;
    case OpKind::kRecompute: on_compute([&] { Recompute(op.unit, op.micro_batch); }); break;
    case OpKind::kBackward: on_compute([&] { Backward(op.unit, op.micro_batch); }); break;
    case OpKind::kRelease: on_compute([&] { units_.at(op.unit).ReleaseCompute(); }); break;
    case OpKind::kReduceScatter: ReduceScatter(op); break;
    case OpKind::kAccumulateShard: on_compute([&] { AccumulateShard(op); }); break;
    case OpKind::kLocalReduce: on_compute([&] { LocalReduce(op); }); break;
    case OpKind::kAllReduce: AllReduceUnit(op); break;
    case OpKind::kGradNorm: on_compute([&] { GradNorm(op); }); break;
    case OpKind::kAllReduceGradNorm: AllReduceGradNorm(op); break;
    case OpKind::kClipGradients: on_compute([&] { ClipGradients(op); }); break;
    case OpKind::kAllReduceLoss: AllReduceLoss(op); break;
    case OpKind::kOptimizerStep:
      on_compute([&] {
        OptimizerStep(op);
        MaybeDelayForTest(op);
      });
      break;
    case OpKind::kCopyGradsToHost: CopyGradsToHost(op); break;
    case OpKind::kCopyMasterToHost: CopyMasterToHost(op); break;
    case OpKind::kCpuOptimizerStep:
      recorder_->Start(op.id, Where::kHost);
      CpuOptimizerStep(op);
      recorder_->Stop(op.id, Where::kHost);
      break;
    case OpKind::kCopyParamsToDevice: CopyParamsToDevice(op); break;
    case OpKind::kCopyParamsForGather: CopyParamsForGather(op); break;
    case OpKind::kCopyMasterToDevice: CopyMasterToDevice(op); break;
  }
}

// ---------------------------------------------------------------------------
// Compute

// A micro-batch's attention layout, at its embedding's forward, before the
// embedding's output (the planner's EmbeddingForward allocates in this order).
void StepInterpreter::MakeLayout(int mb) {
  if (!program_.document_attention) return;
  layouts_[mb] = DocumentLayout(spans_.at(mb), window_.rope, device_, document_mask_);
}

void StepInterpreter::Forward(int unit, int mb) {
  TORCH_CHECK(mb >= 0 && mb < static_cast<int>(inputs_.size()), "forward of micro-batch ", mb, " out of range");
  if (evaluating_) {
    EvaluationForward(unit, mb);
    return;
  }
  const auto& params = units_.at(unit).params();
  Activation a;
  switch (model_.unit_kind(unit)) {
    case UnitKind::kEmbedding:
      MakeLayout(mb);
      a.output = model_.EmbeddingForward(params, inputs_[mb]);
      break;
    case UnitKind::kBlock: {
      // A fresh leaf: this unit's graph stops here, and its .grad after
      // backward is exactly the gradient to hand to the unit below.
      a.input = activations_.at({unit - 1, mb}).output.detach().requires_grad_(true);
      const int layer = unit - 1;
      if (recomputed_.count({unit, mb}) > 0) {
        at::NoGradGuard no_grad;  // keep only the input; activations die here
        a.output = model_.BlockForward(layer, params, a.input, LayoutFor(mb));
      } else {
        a.output = model_.BlockForward(layer, params, a.input, LayoutFor(mb));
      }
      break;
    }
    case UnitKind::kHead: {
      a.input = activations_.at({unit - 1, mb}).output.detach().requires_grad_(true);
      // The fused form's loss adds its weight gradient straight into the
      // flat gradient of the unit holding the output weight (the embedding's
      // when tied), which therefore exists from this forward on, not from the
      // head's backward (chunked_cross_entropy.h; the planner's head forward
      // allocates it here too). Materialised first, as the planner orders it.
      const bool fused = model_.RunsFusedKernels(a.input);
      FlatUnit& holder = units_.at(model_.spec().tied_embeddings ? model_.embedding_unit() : unit);
      if (fused) holder.MaterializeComputeGrad();
      at::Tensor normed = model_.FinalNorm(params, a.input);
      at::Tensor weight = model_.OutputWeight(params, units_.at(model_.embedding_unit()).params());
      a.output = HeadLoss(normed, weight, mb, fused, fused ? weight.grad() : at::Tensor());
      loss_sum_ += a.output.detach();
      break;
    }
  }
  activations_[{unit, mb}] = std::move(a);
}

// The micro-batch's loss from the final norm's output: over every target,
// or, under a loss mask, over the trained ones only (their rows selected, so
// the masked ones cost no logits and get exactly no gradient).
at::Tensor StepInterpreter::HeadLoss(const at::Tensor& normed, const at::Tensor& weight, int mb, bool fused,
                                     const at::Tensor& weight_grad_into) {
  at::Tensor hidden = normed.reshape({-1, normed.size(-1)});
  at::Tensor targets = targets_[mb];
  if (const at::Tensor& rows = trained_rows_[mb]; rows.defined()) {
    if (rows.numel() == 0) return (normed.sum() * 0).to(at::kFloat);  // nothing trained: zero loss and gradient
    hidden = hidden.index_select(0, rows);
    targets = targets.index_select(0, rows);
  }
  // Backward (StepInterpreter::Backward) seeds the loss with 1 / micro-batches:
  // the loss builds its gradients for that seed and scales nothing after.
  // An evaluation's loss has no backward; the seed is unused there.
  return ChunkedCrossEntropy(hidden, weight, targets, program_.loss_chunk_tokens, fused, weight_grad_into,
                             loss_denominator_[mb], HeadSeed());
}

// An evaluation's forward: no graph, and the activation each unit reads is
// dropped once read (the program frees it there).
void StepInterpreter::EvaluationForward(int unit, int mb) {
  at::NoGradGuard no_grad;
  const auto& params = units_.at(unit).params();
  switch (model_.unit_kind(unit)) {
    case UnitKind::kEmbedding:
      MakeLayout(mb);
      eval_hidden_[mb] = model_.EmbeddingForward(params, inputs_[mb]);
      break;
    case UnitKind::kBlock: {
      at::Tensor& hidden = eval_hidden_.at(mb);
      hidden = model_.BlockForward(unit - 1, params, hidden, LayoutFor(mb));  // the input dies as the output takes its place
      break;
    }
    case UnitKind::kHead: {
      const at::Tensor input = std::move(eval_hidden_.at(mb));
      eval_hidden_.erase(mb);
      const at::Tensor normed = model_.FinalNorm(params, input);
      // Detached: a weight that requires grad would make the loss build its gradient.
      const at::Tensor weight =
          model_.OutputWeight(params, units_.at(model_.embedding_unit()).params()).detach();
      loss_sum_ += HeadLoss(normed, weight, mb, model_.RunsFusedKernels(input), at::Tensor());
      layouts_.erase(mb);  // its last reader done
      break;
    }
  }
}

void StepInterpreter::Recompute(int unit, int mb) {
  Activation& a = activations_.at({unit, mb});
  a.output = model_.BlockForward(unit - 1, units_.at(unit).params(), a.input, LayoutFor(mb));
}

void StepInterpreter::Backward(int unit, int mb) {
  Activation& a = activations_.at({unit, mb});
  const UnitKind kind = model_.unit_kind(unit);
  // Unsharded gradient buffers exist from the backward that first writes
  // them to their reduction (the tied embedding's from the head's).
  units_.at(unit).MaterializeComputeGrad();
  if (kind == UnitKind::kHead && model_.spec().tied_embeddings)
    units_.at(model_.embedding_unit()).MaterializeComputeGrad();
  if (kind == UnitKind::kHead) {
    at::Tensor seed = at::full({}, HeadSeed(), a.output.options());  // what HeadLoss built the gradient for
    torch::autograd::backward({a.output}, {seed});
  } else {
    TORCH_CHECK(kind != UnitKind::kBlock || a.output.requires_grad(), "backward of unit ", unit, " micro-batch ", mb,
                ": its forward kept no graph and the program has no recompute op for it");
    at::Tensor grad = grad_flowing_.at(mb);
    torch::autograd::backward({a.output}, {grad});
  }
  if (a.input.defined()) grad_flowing_[mb] = a.input.grad();
  else grad_flowing_.erase(mb);
  activations_.erase({unit, mb});  // frees this unit's graph and saved tensors
  if (kind == UnitKind::kEmbedding) layouts_.erase(mb);  // the micro-batch's last reader of it done
  if (!Sharded(unit)) return;  // reduced by the program's reduce-local op
  // Sharded: the gradient in the reduce dtype is the reduce-scatter's private
  // input; the compute-dtype buffer goes back to the allocator at once (the
  // next backward of this unit gets fresh, zeroed bytes). A tied
  // embedding's buffer also holds the head's contribution by now; it is
  // reduced with the embedding, whose backward comes last.
  at::NoGradGuard no_grad;
  FlatUnit& u = units_.at(unit);
  const at::ScalarType reduce = ScalarTypeOf(program_.reduce_dtype);
  reduce_input_[unit] = u.ComputeGradIn(reduce);
  u.ReleaseComputeGrad();
}

void StepInterpreter::AccumulateShard(const StepOp& op) {
  // The op's dep is its reduce-scatter: the stream already waits for it.
  int rs = -1;
  for (int d : op.deps)
    if (program_.ops[d].kind == OpKind::kReduceScatter && program_.ops[d].unit == op.unit) rs = d;
  auto shard = reduced_shard_.find(rs);
  TORCH_CHECK(shard != reduced_shard_.end(), "accumulate of unit ", op.unit, " without its reduce-scatter");
  at::NoGradGuard no_grad;
  FlatUnit& unit = units_.at(op.unit);
  unit.AccumulateIntoGrad(shard->second, 1.0 / static_cast<double>(unit.group_size()));
  if (op.gradient_scale != 1.0) unit.grad().mul_(op.gradient_scale);
  reduced_shard_.erase(shard);  // the stream-ordered allocator reuses it after the add
}

void StepInterpreter::LocalReduce(const StepOp& op) {
  FlatUnit& unit = units_.at(op.unit);
  // The step's last contribution, unscaled, is the unit's final gradient:
  // its widening pass can sum the squares for the grad norm as it writes.
  const bool final_gradient = op.micro_batch == program_.micro_batches - 1 && op.gradient_scale == 1.0;
  at::Tensor square_sum;
  unit.ReduceGradientsLocal(/*release=*/true, final_gradient ? &square_sum : nullptr);
  if (square_sum.defined()) grad_square_sum_[op.unit] = square_sum;
  if (op.gradient_scale != 1.0) {
    at::NoGradGuard no_grad;
    unit.grad().mul_(op.gradient_scale);
  }
}

void StepInterpreter::GradNorm(const StepOp& op) {
  (void)op;
  // The program sums this over the shard group. An edge unit kept whole
  // (replicate_edges) has the same whole gradient on every rank of the
  // group: only the group's first rank counts it, so it counts once.
  const bool first_of_group = comms_.shard == nullptr || comms_.shard->rank() == 0;
  std::vector<at::Tensor> grads, squares;
  for (size_t i = 0; i < units_.size(); ++i) {
    FlatUnit& u = units_[i];
    TORCH_CHECK(!u.grad_stale(), "grad norm: a unit's gradient was read before any reduction wrote it this step");
    if (!first_of_group && u.group_size() != program_.shard_group_size) continue;
    auto known = grad_square_sum_.find(static_cast<int>(i));
    if (known != grad_square_sum_.end()) squares.push_back(known->second.reshape({}));
    else grads.push_back(u.grad());
  }
  if (!grads.empty()) squares.push_back(AdamW::SumOfSquares(grads));
  TORCH_CHECK(!squares.empty(), "grad norm: no gradient to take the norm of");
  norm_sq_ = at::stack(squares).sum().reshape({1}).contiguous();
}

void StepInterpreter::ClipGradients(const StepOp& op) {
  (void)op;
  TORCH_CHECK(norm_sq_.defined(), "clip gradients before the grad norm op");
  grad_norm_ = std::sqrt(norm_sq_.sum().item<double>());  // the host waits for the device here
  skip_update_ = update_gate_ && !update_gate_(grad_norm_);
  if (skip_update_) return;
  // The factor, not a pass over the gradients: AdamW applies it as it reads
  // each gradient (the fused kernel in a register; the offloaded one, whose
  // gradients are on their way to the host unclipped, in its CPU loop). On
  // an H200 the in-place scaling was 2.9 ms of a Llama-3.2-1B step.
  clip_scale_ = optimizer_.ClipScale(grad_norm_);
}

void StepInterpreter::OptimizerStep(const StepOp& op) {
  FlatUnit& unit = units_.at(op.unit);
  if (!skip_update_) {
    // compute_shard is what the next gathers send (or, resident, the compute
    // copy itself); undefined on one GPU with gathers, whose "gather" casts.
    // With the master on the host (offload params) the update runs on the
    // copy the program's h2d op brought up, which its d2h op takes back down.
    at::Tensor& master = params_on_host_ ? master_staging_.at(op.unit) : unit.master();
    optimizer_.Update(op.unit, master, unit.grad(), unit.compute_shard(), clip_scale_);
  }
  // A compute-dtype gradient AdamW read (planner/gradient_path.h) goes back
  // to the allocator here, as the program frees it (stream-ordered: the
  // update just issued still reads it safely), skipped update or not —
  // unless the step's CUDA graph made it: the next replay writes it there
  // again, so it stays (the memory model keeps it too).
  const bool graph_made_it = Graphed() && runs_ >= 1;
  if (unit.optimizer_reads_compute_grad() && !graph_made_it) unit.ReleaseComputeGrad();
}

// ---------------------------------------------------------------------------
// Collectives

void StepInterpreter::Gather(const StepOp& op) {
  FlatUnit& unit = units_.at(op.unit);
  if (unit.compute_shard_on_host()) {
    // Streamed parameters: the shard the program's h2d op copied up is the
    // source, and its bytes go back to the allocator once the gather ran.
    auto staged = param_staging_.find(op.unit);
    TORCH_CHECK(staged != param_staging_.end(), "gather of unit ", op.unit, " before its host-to-device copy");
    at::Tensor source = std::move(staged->second);
    param_staging_.erase(staged);
    unit.MaterializeCompute();
    // On the host-to-device stream, behind the copy: the compute that reads
    // the unit waits for this op (its event, or the collective), not earlier.
    if (!Sharded(op.unit)) {
      at::Tensor compute = unit.compute();
      copies_->Run(StreamKind::kHostToDevice, op.id, *recorder_, [&] {
        at::NoGradGuard no_grad;
        compute.copy_(source, /*non_blocking=*/true);
      });
      return;  // `source` is dropped here: its stream (the copy stream) reads it before any reuse
    }
    Communicator* group = GroupFor(op);
    copies_->Within(StreamKind::kHostToDevice,
                    [&] { Track(op, group->AllGather(source, unit.compute(), op.name), group, {source}); });
    return;
  }
  if (!Sharded(op.unit)) {
    // One rank holds it all: the gather is the cast master -> compute.
    recorder_->Start(op.id, StepRecorder::Where::kCurrentStream);
    unit.GatherLocal();
    recorder_->Stop(op.id, StepRecorder::Where::kCurrentStream);
    return;
  }
  unit.MaterializeCompute();
  Communicator* group = GroupFor(op);
  if (unit.compute_shard().defined()) {
    Track(op, group->AllGather(unit.compute_shard(), unit.compute(), op.name), group);
    return;
  }
  // Plan::cast_at_gather: the shard to send is cast from the master on the
  // gather's side stream, which (like the collective) starts after the
  // compute stream's queued work, so the cast's HBM pass runs beside the
  // compute in flight instead of in line with it; the collective follows it
  // there. The cast lives until the collective is waited for.
  copies_->Within(StreamKind::kGather, [&] {
    at::Tensor sent = unit.CastShardForGather();
    Track(op, group->AllGather(sent, unit.compute(), op.name), group, {sent});
  });
}

void StepInterpreter::ReduceScatter(const StepOp& op) {
  FlatUnit& unit = units_.at(op.unit);
  auto input = reduce_input_.find(op.unit);
  TORCH_CHECK(input != reduce_input_.end(), "reduce-scatter of unit ", op.unit, " before its backward");
  at::Tensor full = std::move(input->second);
  reduce_input_.erase(input);
  at::Tensor shard = at::empty({unit.shard_numel()}, full.options());
  reduced_shard_[op.id] = shard;
  Communicator* group = GroupFor(op);
  // `full` lives until the collective is waited for (the allocator also
  // knows it is in use on the communicator's stream).
  Track(op, group->ReduceScatter(full, shard, op.name), group, {full});
}

void StepInterpreter::AllReduceUnit(const StepOp& op) {
  Communicator* group = GroupFor(op);
  TORCH_CHECK(group != nullptr && group->size() > 1, "op \"", op.name, "\" needs a replica group of several ranks");
  at::Tensor grad = units_.at(op.unit).grad();
  Track(op, group->AllReduce(grad, op.name), group);
}

void StepInterpreter::AllReduceGradNorm(const StepOp& op) {
  Communicator* group = GroupFor(op);
  TORCH_CHECK(group != nullptr, "op \"", op.name, "\" needs the shard group");
  Track(op, group->AllReduce(norm_sq_, op.name), group);
}

void StepInterpreter::AllReduceLoss(const StepOp& op) {
  Communicator* group = GroupFor(op);
  TORCH_CHECK(group != nullptr, "op \"", op.name, "\" needs the world group");
  loss_sum_ = loss_sum_.reshape({1}).contiguous();
  Track(op, group->AllReduce(loss_sum_, op.name), group);
}

// ---------------------------------------------------------------------------
// Offloaded optimizer

void StepInterpreter::CopyMasterToHost(const StepOp& op) {
  // Offload params: the master updated on the GPU goes back to the host.
  // The compute stream then waits for this copy (an event; the host runs
  // on) and the staging buffer goes back to the compute stream's pool, so
  // the next unit's staging reuses the same bytes in order. Freeing it with
  // record_stream instead let the host, which runs ahead, allocate every
  // unit's staging before any copy had finished: 11 GiB reserved above the
  // prediction for Llama-3.2-3B. The wait costs nothing measurable: the
  // next update waits for its own copy up, as long as this one.
  TORCH_CHECK(params_on_host_, "d2h master in a program whose masters live on the device");
  FlatUnit& unit = units_.at(op.unit);
  auto staged = master_staging_.find(op.unit);
  TORCH_CHECK(staged != master_staging_.end(), "d2h master of unit ", op.unit, " before its update");
  at::Tensor src = std::move(staged->second);
  master_staging_.erase(staged);
  at::Tensor dst = unit.master();
  copies_->Run(op.stream, op.id, *recorder_, [&] { dst.copy_(src, /*non_blocking=*/true); });
  copies_->DeviceWait(op.id);
}

void StepInterpreter::CopyGradsToHost(const StepOp& op) {
  TORCH_CHECK(offload_, "d2h grads in a program whose optimizer runs on the device");
  // Staged per unit: this step's gradient, final now (the update gate has
  // not spoken yet: the next Run or FinishUpdate applies it, or not).
  // Through the slots: the previous step's, the one this Run applies, and
  // nothing to copy when there is no update to apply.
  at::Tensor src = units_.at(op.unit).grad();
  at::Tensor dst = HostGradFor(op.unit);
  const bool copies = stages_every_unit_ || applying_.has_value();
  copies_->Run(op.stream, op.id, *recorder_, [&] {
    if (copies) dst.copy_(src, /*non_blocking=*/true);
  });
}

at::Tensor StepInterpreter::HostGradFor(int unit) {
  return host_grads_.at(unit % host_grads_.size()).narrow(0, 0, units_.at(unit).shard_numel());
}

at::Tensor StepInterpreter::HostComputeFor(int unit) {
  FlatUnit& u = units_.at(unit);
  if (params_on_host_) return u.compute_shard();
  return host_compute_.at(unit % host_compute_.size()).narrow(0, 0, u.shard_numel());
}

void StepInterpreter::CpuOptimizerStep(const StepOp& op) {
  TORCH_CHECK(offload_, "CPU optimizer step in a program without offload");
  if (!applying_) return;
  FlatUnit& unit = units_.at(op.unit);
  optimizer_.UpdateOnHost(op.unit, unit.master(), HostGradFor(op.unit), HostComputeFor(op.unit), *applying_);
  MaybeDelayForTest(op);  // only an update that ran
}

void StepInterpreter::FinishUpdate() {
  const std::optional<AdamWScalars> update = std::exchange(next_update_, std::nullopt);
  if (!update) return;
  at::NoGradGuard no_grad;
  // Unit by unit through the same staging, synchronously: Run has returned,
  // so no copy of it still reads or writes it. Staged per unit the gradients
  // came down during Run; through the slots they still wait on the device.
  for (size_t u = 0; u < units_.size(); ++u) {
    FlatUnit& unit = units_[u];
    const int i = static_cast<int>(u);
    at::Tensor grad = HostGradFor(i), compute = HostComputeFor(i);
    if (!stages_every_unit_) grad.copy_(unit.grad());
    optimizer_.UpdateOnHost(i, unit.master(), grad, compute, *update);
    // Streamed parameters: the update wrote the host shard the gathers read.
    if (!params_on_host_) unit.compute_shard().copy_(compute);  // synchronous from pinned memory
  }
}

void StepInterpreter::CopyParamsForGather(const StepOp& op) {
  // Streamed parameters: this rank's compute-dtype shard, up from the host
  // just ahead of the gather that reads it (program_order.cc issues the
  // pair early, so the copy overlaps the compute before it).
  FlatUnit& unit = units_.at(op.unit);
  TORCH_CHECK(unit.compute_shard_on_host(), "h2d params before a gather, but unit ", op.unit,
              " keeps its parameters on the device");
  // Allocated with the copy stream current, so its bytes belong to that
  // stream's pool: the gather that reads it runs on the same stream, and
  // dropping it afterwards needs no record_stream (which holds freed
  // blocks until an event is polled: +4.7 GiB reserved for Llama-3.2-3B).
  at::Tensor src = unit.compute_shard();
  at::Tensor dst;
  copies_->Run(op.stream, op.id, *recorder_, [&] {
    dst = at::empty({unit.shard_numel()}, src.options().device(device_).pinned_memory(false));
    dst.copy_(src, /*non_blocking=*/true);
  });
  param_staging_[op.unit] = dst;
}

void StepInterpreter::CopyMasterToDevice(const StepOp& op) {
  // Offload params: the fp32 master up for the GPU optimizer step.
  TORCH_CHECK(params_on_host_, "h2d master in a program whose masters live on the device");
  FlatUnit& unit = units_.at(op.unit);
  at::Tensor src = unit.master();
  at::Tensor dst = at::empty({unit.shard_numel()}, src.options().device(device_).pinned_memory(false));
  master_staging_[op.unit] = dst;
  copies_->Run(op.stream, op.id, *recorder_, [&] { dst.copy_(src, /*non_blocking=*/true); });
}

void StepInterpreter::CopyParamsToDevice(const StepOp& op) {
  TORCH_CHECK(offload_, "h2d params in a program whose optimizer runs on the device");
  at::Tensor src = HostComputeFor(op.unit);
  at::Tensor dst = units_.at(op.unit).compute_shard();  // the resident compute copy itself under no_shard
  // Nothing was updated (the run's first step, a skipped update): the shard
  // on the device is current and the staging copy may not be.
  const bool updated = applying_.has_value();
  copies_->Run(op.stream, op.id, *recorder_, [&] {
    if (updated) dst.copy_(src, /*non_blocking=*/true);
  });
}

}  // namespace llmplan::executor
