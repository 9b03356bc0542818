// ProgramBuilder: the order of phases, the units, the memory that lives for
// the whole step, and the bookkeeping every phase uses (see program_builder.h).
#include "planner/program_builder.h"

#include <algorithm>
#include <atomic>
#include <charconv>

#include "planner/gradient_path.h"
#include "planner/nvme_offload.h"

namespace llmplan {

namespace {

std::vector<Unit> UnitsOf(const Plan& plan) {
  std::vector<Unit> units;
  auto add = [&](UnitKind k, int layer, int64_t params) {
    const int index = static_cast<int>(units.size());
    const int g = plan.UnitShardGroup(index);
    units.push_back(Unit{k, layer, params, (params + g - 1) / g * g, g, plan.UnitResident(index)});
  };
  const ModelSpec& m = plan.model;
  add(UnitKind::kEmbedding, -1, m.EmbeddingParams());
  for (int l = 0; l < m.layers; ++l) add(UnitKind::kBlock, l, m.ParamsPerBlock());
  add(UnitKind::kHead, -1, m.HeadParams() + m.FinalNormParams());
  return units;
}

// Where the fp32 master, gradient and AdamW state live (Plan::offload): on
// the device, or pinned on the host. `shard`: this rank's elements over every
// unit; `staged`: those of the offloaded optimizer's host staging.
void PlaceTrainingState(const Plan& plan, bool adamw_reads_compute_grad, const std::vector<Unit>& units,
                        double shard, double staged, PersistentMemory& pm, HostMemory& host) {
  const Offload o = plan.offload;
  const double param_bytes = DTypeBytes(plan.param_dtype);
  // fp32 gradient shard accumulated over micro-batches (the whole gradient
  // when not sharded). On the device in every mode: the norm and clipping
  // read it there, and accumulating on the host instead would put a CPU add
  // of every micro-batch's shard on the step's critical path. None when
  // AdamW reads the compute-dtype gradient (gradient_path.h).
  pm.grad_shards = adamw_reads_compute_grad ? 0 : 4 * shard;
  if (o == Offload::kNone) {
    pm.param_shards = 4 * shard;
    pm.optimizer_state = 8 * shard;
  } else if (o == Offload::kOptimizer) {
    // Master weights and AdamW state live with the CPU optimizer; the GPU keeps
    // the bf16 shard that all-gathers read.
    host.master_params = 4 * shard;
    host.optimizer_state = 8 * shard;
    host.grad_staging = 4 * staged;
    // The CPU step writes the new bf16 shard into pinned memory so the copy
    // up is an asynchronous DMA (the executor's CpuAdamW path does this).
    host.param_staging = param_bytes * staged;
  } else if (o == Offload::kParams) {
    // fp32 master on the host, streamed in for the GPU optimizer step; the bf16
    // shard stays for the gathers.
    pm.optimizer_state = 8 * shard;
    host.master_params = 4 * shard;
  } else {  // optimizer + params: the compute-dtype shard too lives on the host and
            // streams up before each gather; the GPU keeps only the gradient shard
    host.master_params = (4 + param_bytes) * shard;
    host.optimizer_state = 8 * shard;
    host.grad_staging = 4 * staged;
  }
  if (plan.OptimizerStateOnNvme()) {
    // m and v move to the SSD; the host keeps the blocks they stream through.
    std::vector<int64_t> shards;
    for (const auto& u : units) shards.push_back(u.padded_params / u.group_size);
    host.optimizer_state = 0;
    host.nvme_staging = NvmeStagingBytes(shards);
    host.nvme_state = static_cast<double>(NvmeFileBytes(shards));
  }
}

// The rest of the device's step-long memory: CUDA context, workspaces, the
// step's inputs, the communicators' buffers.
void PlaceFixedMemory(const Plan& plan, const HardwareProfile& profile, PersistentMemory& pm) {
  pm.cuda_context = profile.device_kind == "cuda" ? profile.cuda_context_bytes : 0;
  pm.workspaces = profile.workspace_bytes;
  // Every micro-batch's tokens (int64 [micro_batch, seq + 1]) and RoPE's cos
  // and sin tables ([seq, head_dim] in the compute dtype).
  pm.step_inputs = static_cast<double>(plan.grad_accum * plan.micro_batch * (plan.seq_len + 1)) * 8 +
                   2.0 * static_cast<double>(plan.seq_len * plan.model.head_dim) * DTypeBytes(plan.param_dtype);
  // One communicator per process group this plan uses: the shard group has
  // two (gathers and reductions run on their own streams, as the program
  // says), the replica and world groups one each when they have several ranks.
  int comms = 0;
  if (plan.shard_group_size > 1) comms += 2;
  if (plan.ReplicaGroups() > 1) comms += 1;
  if (plan.gpus > 1) comms += 1;
  pm.collective_buffers = comms * profile.collective_buffer_bytes;
}

// What the ops work on: StepProgram's batch, dtypes, groups and offload layout.
void DescribeRun(const Plan& plan, StepProgram& program) {
  program.micro_batch = plan.micro_batch;
  program.seq_len = plan.seq_len;
  program.loss_chunk_tokens = plan.loss_chunk_tokens;
  program.document_attention = plan.attention == AttentionSpan::kDocuments;
  program.compute_dtype = plan.param_dtype;
  program.reduce_dtype = plan.reduce_dtype;
  program.gpus = plan.gpus;
  program.shard_group_size = plan.shard_group_size;
  program.replica_groups = plan.ReplicaGroups();
  const int units = static_cast<int>(program.units.size());
  OffloadLayout& o = program.offload;
  o.optimizer_on_host = OffloadsOptimizer(plan.offload);
  o.master_on_host = OffloadsParams(plan.offload);
  o.staged_per_unit = plan.StagesEveryUnit();
  if (o.optimizer_on_host) o.staging_buffers = o.staged_per_unit ? units : std::min(kOffloadStagingSlots, units);
}

}  // namespace

ProgramBuilder::ProgramBuilder(const Plan& plan, const HardwareProfile& profile, bool op_names)
    : plan_(plan),
      profile_(profile),
      op_names_(op_names),
      shape_(ShapeOfPlan(plan, profile.device_kind == "cpu")),
      memory_calls_(shape_, OutputMatrixParams(), static_cast<double>(plan.model.EmbeddingParams())) {}

StepProgram ProgramBuilder::Build() {
  MakeUnits();
  MakePersistent();
  DescribeRun(plan_, program_);
  ForwardResults forward(NumUnits());
  for (int mb = 0; mb < static_cast<int>(plan_.grad_accum); ++mb) {
    Forward(mb, forward);
    Backward(mb, forward);
  }
  const int clip = ClipGradients();
  OptimizerStep(clip);
  LossAllReduce(forward.loss);
  return std::move(program_);
}

StepProgram ProgramBuilder::BuildEvaluation(int micro_batches) {
  evaluating_ = true;
  MakeUnits();
  program_.micro_batches = micro_batches;
  program_.evaluation = true;
  MakePersistent();
  // The evaluation's token batches on the device instead of the step's (which
  // the step freed), and RoPE's tables as before.
  PersistentMemory& pm = program_.persistent;
  pm.step_inputs = static_cast<double>(micro_batches * plan_.micro_batch * (plan_.seq_len + 1)) * 8 +
                   2.0 * static_cast<double>(plan_.seq_len * plan_.model.head_dim) * ParamBytes();
  DescribeRun(plan_, program_);
  int loss = -1;
  for (int mb = 0; mb < micro_batches; ++mb) loss = EvaluationForward(mb);
  LossAllReduce(loss);
  return std::move(program_);
}

void ProgramBuilder::MakeUnits() {
  program_.units = UnitsOf(plan_);
  const ModelSpec& m = plan_.model;
  program_.micro_batches = static_cast<int>(plan_.grad_accum);
  // Per micro-batch and unit: gather, forward, release, gather, recompute,
  // backward, release, reduction and its accumulation; then the step's end.
  program_.ops.reserve(static_cast<size_t>(plan_.grad_accum) * (m.layers + 2) * 9 + (m.layers + 2) * 4 + 8);
  // A unit makes up to 85 tensors per micro-batch on a GPU, 103 on a CPU
  // (plain attention), a checkpointed block's recompute included: reserved
  // once, so the registry never moves its (megabytes of) entries.
  tensors_.Reserve(static_cast<size_t>(plan_.grad_accum) * (m.layers + 2) * 104);
  const int n = NumUnits();
  gathered_ = GatheredUnits(n);
  grads_ = GradientState(n);
  host_ = HostUpdates(n);
}

void ProgramBuilder::MakePersistent() {
  double shard = 0;  // this rank's elements over every unit
  for (int u = 0; u < NumUnits(); ++u) shard += ShardParams(u);
  // The offloaded optimizer's host staging, in elements per direction
  // (Plan::offload_staging): every unit's shard, or kOffloadStagingSlots
  // slots the size of the largest.
  double largest_shard = 0;
  for (int u = 0; u < NumUnits(); ++u) largest_shard = std::max(largest_shard, ShardParams(u));
  const double staged =
      plan_.StagesEveryUnit() ? shard : std::min(kOffloadStagingSlots, NumUnits()) * largest_shard;
  PersistentMemory& pm = program_.persistent;
  PlaceTrainingState(plan_, AdamWReadsComputeGrad(), program_.units, shard, staged, pm, program_.host);
  // The compute-dtype copy the device keeps per unit (KeepsComputeShard):
  // the whole unit when it is resident (no_shard, an edge kept whole).
  for (int u = 0; u < NumUnits(); ++u)
    if (KeepsComputeShard(u)) pm.compute_params += ParamBytes() * (UnitAt(u).resident ? PaddedParams(u) : ShardParams(u));
  PlaceFixedMemory(plan_, profile_, pm);
}

int ProgramBuilder::Add(StepOp op) {
  op.id = static_cast<int>(program_.ops.size());
  op.deps.erase(std::remove(op.deps.begin(), op.deps.end(), -1), op.deps.end());
  std::sort(op.deps.begin(), op.deps.end());
  op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
  program_.ops.push_back(std::move(op));
  return program_.ops.back().id;
}

std::string ProgramBuilder::OpName(std::string_view what, int u, int mb, bool backward) const {
  if (!op_names_) return {};
  // Into a buffer, then one string: to_string and operator+ cost ~600
  // instructions a name, and a 70B program names ~3,000 ops.
  char buffer[96];
  char* end = buffer;
  auto put = [&](std::string_view text) {
    const size_t n = std::min(text.size(), static_cast<size_t>(buffer + sizeof buffer - end));
    end = std::copy_n(text.data(), n, end);
  };
  auto put_int = [&](int value) { end = std::to_chars(end, buffer + sizeof buffer, value).ptr; };
  put(what);
  switch (UnitAt(u).kind) {
    case UnitKind::kEmbedding: put(" embed"); break;
    case UnitKind::kHead: put(" head"); break;
    case UnitKind::kBlock: put(" block "); put_int(UnitAt(u).layer); break;
  }
  if (backward) put(" bwd");
  if (mb >= 0) {
    put(" mb ");
    put_int(mb);
  }
  return std::string(buffer, end);
}

StepOp ProgramBuilder::HostCopy(OpKind kind, int u, std::string_view what, double bytes, int mb,
                                bool backward) const {
  StepOp copy;
  copy.kind = kind;
  copy.stream = CopiesToDevice(kind) ? StreamKind::kHostToDevice : StreamKind::kDeviceToHost;
  copy.unit = u;
  copy.micro_batch = mb;
  copy.name = OpName(what, u, mb, backward);
  copy.work.copy_bytes = bytes;
  return copy;
}

void ProgramBuilder::CallMemoryModel(MemoryCall call, std::span<const int> inputs, std::vector<MemoryDelta>& events,
                                     std::vector<int>& result) {
  const MemoryTemplate& t = memory_calls_.Recorded(call, inputs);
  events.reserve(events.size() + t.events.size());
  tensors_.Stamp(t, inputs, events, result);
}

bool ProgramBuilder::GroupSpansIslands(int count, int stride) const {
  // The profile's islands describe its own node; a plan for nodes of another
  // size is priced by the curves alone.
  if (profile_.islands.empty() || plan_.gpus_per_node != profile_.gpus_per_node) return false;
  std::vector<int> local;
  for (int k = 0; k < count && k * stride < plan_.gpus_per_node; ++k) local.push_back(k * stride);
  return profile_.SpansIslands(local);
}

bool ProgramBuilder::AdamWReadsComputeGrad() const {
  return OptimizerReadsComputeGradient(plan_, profile_.device_kind != "cpu");
}

bool ProgramBuilder::KeepsParamsThroughBackward(int u) const {
  const bool tied_embedding = plan_.model.tied_embeddings && u == 0;  // the head uses it
  if (evaluating_) return UnitAt(u).kind == UnitKind::kHead || tied_embedding;
  return plan_.strategy == ShardingStrategy::kShardGradOp || UnitAt(u).kind == UnitKind::kHead || tied_embedding;
}

bool ProgramBuilder::KeepsComputeShard(int u) const {
  if (UnitAt(u).resident) return true;
  switch (plan_.offload) {
    case Offload::kOptimizer:
    case Offload::kParams: return true;  // the update sends (or writes) it up
    case Offload::kOptimizerAndParams: return false;  // in pinned host memory
    case Offload::kNone: return ShardGroup(u) > 1 && !plan_.cast_at_gather;
  }
  return false;
}

namespace {
std::atomic<int64_t> programs_built{0};
}  // namespace

int64_t StepProgramsBuilt() { return programs_built.load(std::memory_order_relaxed); }

StepProgram BuildEvaluationProgram(const Plan& plan, const HardwareProfile& profile, int micro_batches) {
  StepProgram program = ProgramBuilder(plan, profile).BuildEvaluation(micro_batches);
  ToIssueOrder(program);
  return program;
}

StepProgram BuildStepProgram(const Plan& plan, const HardwareProfile& profile, bool op_names) {
  programs_built.fetch_add(1, std::memory_order_relaxed);
  StepProgram program = ProgramBuilder(plan, profile, op_names).Build();
  ToIssueOrder(program);
  if (plan.cuda_graph && profile.device_kind != "cpu") MarkCapturedOps(program);
  return program;
}

}  // namespace llmplan
