// ProgramBuilder: units, persistent memory, op bookkeeping and the order of
// phases (see program_builder.h). Also the public names of step_program.h.
#include "planner/program_builder.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "planner/nvme_offload.h"

namespace llmplan {

std::string StreamName(StreamKind s) {
  switch (s) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kGather: return "all-gather";
    case StreamKind::kReduce: return "reduce";
    case StreamKind::kHostToDevice: return "host-to-device";
    case StreamKind::kDeviceToHost: return "device-to-host";
    case StreamKind::kCpu: return "cpu";
  }
  return "?";
}

std::string OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kForward: return "forward";
    case OpKind::kRecompute: return "recompute";
    case OpKind::kBackward: return "backward";
    case OpKind::kRelease: return "release";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAccumulateShard: return "accumulate_shard";
    case OpKind::kLocalReduce: return "local_reduce";
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kGradNorm: return "grad_norm";
    case OpKind::kAllReduceGradNorm: return "all_reduce_grad_norm";
    case OpKind::kClipGradients: return "clip_gradients";
    case OpKind::kAllReduceLoss: return "all_reduce_loss";
    case OpKind::kOptimizerStep: return "optimizer_step";
    case OpKind::kCpuOptimizerStep: return "cpu_optimizer_step";
    case OpKind::kCopyGradsToHost: return "copy_grads_to_host";
    case OpKind::kCopyParamsToDevice: return "copy_params_to_device";
    case OpKind::kCopyParamsForGather: return "copy_params_for_gather";
    case OpKind::kCopyMasterToDevice: return "copy_master_to_device";
    case OpKind::kCopyMasterToHost: return "copy_master_to_host";
  }
  return "?";
}

nlohmann::json StepProgramJson(const StepProgram& program) {
  nlohmann::json ops = nlohmann::json::array();
  for (const StepOp& op : program.ops)
    ops.push_back({{"id", op.id},
                   {"name", op.name},
                   {"kind", OpKindName(op.kind)},
                   {"stream", StreamName(op.stream)},
                   {"group", CommGroupName(op.group)},
                   {"unit", op.unit},
                   {"micro_batch", op.micro_batch},
                   {"deps", op.deps}});
  return {{"ops", ops}, {"micro_batches", program.micro_batches}};
}

std::string CommGroupName(CommGroup g) {
  switch (g) {
    case CommGroup::kNone: return "none";
    case CommGroup::kShard: return "shard";
    case CommGroup::kReplica: return "replica";
    case CommGroup::kWorld: return "world";
  }
  return "?";
}

std::string MemoryCategoryName(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kGatheredParams: return "gathered_params";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kRecompute: return "recompute";
    case MemoryCategory::kWorkspace: return "workspace";
    case MemoryCategory::kLogits: return "logits";
    case MemoryCategory::kGradBuffers: return "grad_buffers";
    case MemoryCategory::kOffloadStaging: return "offload_staging";
  }
  return "?";
}

bool HostBlocks(const StepOp& op, bool cpu_device) {
  switch (op.stream) {
    case StreamKind::kCpu: return true;
    case StreamKind::kCompute:
      // Clipping reads the norm on the host (a device sync) for the factor AdamW applies.
      return cpu_device || op.kind == OpKind::kClipGradients;
    case StreamKind::kHostToDevice:
    case StreamKind::kDeviceToHost: return cpu_device;  // a CPU "copy" is a memcpy on the host
    case StreamKind::kGather:
    case StreamKind::kReduce: return false;  // collectives run on their own stream or thread
  }
  return false;
}

bool CopiesToDevice(OpKind k) {
  return k == OpKind::kCopyParamsToDevice || k == OpKind::kCopyParamsForGather || k == OpKind::kCopyMasterToDevice;
}

bool CopiesToHost(OpKind k) { return k == OpKind::kCopyGradsToHost || k == OpKind::kCopyMasterToHost; }

StepProgram ProgramBuilder::Build() {
  MakeUnits();
  MakePersistent();
  DescribeRun();
  for (int mb = 0; mb < static_cast<int>(plan_.grad_accum); ++mb) {
    Forward(mb);
    Backward(mb);
  }
  ClipGradients();
  OptimizerStep();
  LossAllReduce();
  return std::move(p_);
}

void ProgramBuilder::DescribeRun() {
  p_.micro_batch = plan_.micro_batch;
  p_.seq_len = plan_.seq_len;
  p_.loss_chunk_tokens = plan_.loss_chunk_tokens;
  p_.compute_dtype = plan_.param_dtype;
  p_.reduce_dtype = plan_.reduce_dtype;
  p_.gpus = plan_.gpus;
  p_.shard_group_size = plan_.shard_group_size;
  p_.replica_groups = plan_.ReplicaGroups();
  OffloadLayout& o = p_.offload;
  o.optimizer_on_host = OffloadsOptimizer(plan_.offload);
  o.master_on_host = OffloadsParams(plan_.offload);
  o.staged_per_unit = plan_.StagesEveryUnit();
  if (o.optimizer_on_host) o.staging_buffers = o.staged_per_unit ? NumUnits() : std::min(kOffloadStagingSlots, NumUnits());
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

std::string ProgramBuilder::OpName(std::string_view what, int u, int mb, bool backward) const {
  if (!op_names_) return {};
  // Into a buffer, then one string: to_string and operator+ cost ~600
  // instructions a name.
  char buffer[96];
  char* end = buffer;
  auto put = [&](std::string_view text) {
    const size_t n = std::min(text.size(), static_cast<size_t>(buffer + sizeof buffer - end));
    end = std::copy_n(text.data(), n, end);
  };
  auto put_int = [&](int value) { end = std::to_chars(end, buffer + sizeof buffer, value).ptr; };
  put(what);
  switch (U(u).kind) {
    case UnitKind::kEmbedding: put(" embed"); break;
    case UnitKind::kHead: put(" head"); break;
    case UnitKind::kBlock: put(" block "); put_int(U(u).layer); break;
  }
  if (backward) put(" bwd");
  if (mb >= 0) {
    put(" mb ");
    put_int(mb);
  }
  return std::string(buffer, end);
}

bool ProgramBuilder::KeepsParamsThroughBackward(int u) const {
  return plan_.strategy == ShardingStrategy::kShardGradOp || U(u).kind == UnitKind::kHead || TiedEmbedding(u);
}

bool ProgramBuilder::KeepsComputeShard(int u) const {
  if (U(u).resident) return true;
  switch (plan_.offload) {
    case Offload::kOptimizer:
    case Offload::kParams: return true;  // the update sends (or writes) it up
    case Offload::kOptimizerAndParams: return false;  // in pinned host memory
    case Offload::kNone: return G(u) > 1 && !plan_.cast_at_gather;
  }
  return false;
}

void ProgramBuilder::MakeUnits() {
  const ModelSpec& m = plan_.model;
  auto add = [&](UnitKind k, int layer, int64_t params) {
    const int index = static_cast<int>(p_.units.size());
    const int g = plan_.UnitShardGroup(index);
    Unit u{k, layer, params, (params + g - 1) / g * g, g, plan_.UnitResident(index)};
    p_.units.push_back(u);
  };
  add(UnitKind::kEmbedding, -1, m.EmbeddingParams());
  for (int l = 0; l < m.layers; ++l) add(UnitKind::kBlock, l, m.ParamsPerBlock());
  add(UnitKind::kHead, -1, m.HeadParams() + m.FinalNormParams());
  p_.micro_batches = static_cast<int>(plan_.grad_accum);
  // Per micro-batch and unit: gather, forward, release, gather, recompute,
  // backward, release, reduction and its accumulation; then the step's end.
  p_.ops.reserve(static_cast<size_t>(plan_.grad_accum) * (m.layers + 2) * 9 + (m.layers + 2) * 4 + 8);
  // A unit makes up to 85 tensors per micro-batch on a GPU, 103 on a CPU
  // (plain attention), a checkpointed block's recompute included: reserved
  // once, so the registry never moves its (megabytes of) entries.
  tensors_.Reserve(static_cast<size_t>(plan_.grad_accum) * (m.layers + 2) * 104);
  saved_.assign(static_cast<size_t>(m.layers + 2), {});
  shape_ = ShapeOf(m, plan_.micro_batch, plan_.seq_len, DTypeBytes(plan_.param_dtype), plan_.loss_chunk_tokens,
                   profile_.device_kind == "cpu", plan_.fused_kernels);
  const int n = NumUnits();
  gathered_.assign(n, -1);
  compute_grad_.assign(n, -1);
  reduce_input_.assign(n, -1);
  last_forward_.assign(n, -1);
  gather_fwd_.assign(n, -1);
  grad_final_.assign(n, -1);
  squares_in_reduction_.assign(n, false);
  update_ready_.assign(n, -1);
  grad_down_.assign(n, -1);
  last_release_of_unit_.assign(n, -1);
  current_gather_.assign(n, -1);
}

void ProgramBuilder::MakePersistent() {
  double shard = 0;  // this rank's elements over every unit
  for (int u = 0; u < NumUnits(); ++u) shard += Shard(u);
  PersistentMemory& pm = p_.persistent;
  HostMemory& host = p_.host;
  // The offloaded optimizer's host staging, in elements per direction
  // (Plan::offload_staging): every unit's shard, or kOffloadStagingSlots
  // slots the size of the largest.
  double largest_shard = 0;
  for (int u = 0; u < NumUnits(); ++u) largest_shard = std::max(largest_shard, Shard(u));
  const double staged =
      plan_.StagesEveryUnit() ? shard : std::min(kOffloadStagingSlots, NumUnits()) * largest_shard;
  const Offload o = plan_.offload;
  // fp32 gradient shard accumulated over micro-batches (the whole gradient
  // when not sharded). On the device in every mode: the norm and clipping
  // read it there, and accumulating on the host instead would put a CPU add
  // of every micro-batch's shard on the step's critical path. None when
  // AdamW reads the compute-dtype gradient (gradient_path.h).
  pm.grad_shards = AdamWReadsComputeGrad() ? 0 : 4 * shard;
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
    host.param_staging = ParamBytes() * staged;
  } else if (o == Offload::kParams) {
    // fp32 master on the host, streamed in for the GPU optimizer step; the bf16
    // shard stays for the gathers.
    pm.optimizer_state = 8 * shard;
    host.master_params = 4 * shard;
  } else {  // optimizer + params: the compute-dtype shard too lives on the host and
            // streams up before each gather; the GPU keeps only the gradient shard
    host.master_params = (4 + ParamBytes()) * shard;
    host.optimizer_state = 8 * shard;
    host.grad_staging = 4 * staged;
  }
  if (plan_.OptimizerStateOnNvme()) {
    // m and v move to the SSD; the host keeps the blocks they stream through.
    std::vector<int64_t> shards;
    for (const auto& u : p_.units) shards.push_back(u.padded_params / u.group_size);
    host.optimizer_state = 0;
    host.nvme_staging = NvmeStagingBytes(shards);
    host.nvme_state = static_cast<double>(NvmeFileBytes(shards));
  }
  // The compute-dtype copy the device keeps per unit (KeepsComputeShard):
  // the whole unit when it is resident (no_shard, an edge kept whole).
  for (int u = 0; u < NumUnits(); ++u)
    if (KeepsComputeShard(u)) pm.compute_params += ParamBytes() * (U(u).resident ? Padded(u) : Shard(u));
  pm.cuda_context = profile_.device_kind == "cuda" ? profile_.cuda_context_bytes : 0;
  pm.workspaces = profile_.workspace_bytes;
  // Every micro-batch's tokens (int64 [micro_batch, seq + 1]) and RoPE's cos
  // and sin tables ([seq, head_dim] in the compute dtype).
  pm.step_inputs = static_cast<double>(plan_.grad_accum * plan_.micro_batch * (plan_.seq_len + 1)) * 8 +
                   2.0 * static_cast<double>(plan_.seq_len * plan_.model.head_dim) * ParamBytes();
  // One communicator per process group this plan uses: the shard group has
  // two (gathers and reductions run on their own streams, as the program
  // says), the replica and world groups one each when they have several ranks.
  int comms = 0;
  if (G() > 1) comms += 2;
  if (R() > 1) comms += 1;
  if (plan_.gpus > 1) comms += 1;
  pm.collective_buffers = comms * profile_.collective_buffer_bytes;
}

const MemoryTemplate& ProgramBuilder::Recorded(MemoryCall call, std::span<const int> inputs) {
  auto matches = [&](const Recording& r) {
    if (r.call != call || r.present.size() != inputs.size()) return false;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (r.present[k] != (inputs[k] >= 0)) return false;
    return true;
  };
  auto it = std::find_if(recordings_.begin(), recordings_.end(), matches);
  if (it == recordings_.end()) {
    std::vector<bool> present;
    for (int id : inputs) present.push_back(id >= 0);
    // SavedTensors <-> flattened ids (saved..., output).
    auto saved_of = [](const std::vector<int>& ids, size_t n) {
      SavedTensors s;
      s.saved.assign(ids.begin(), ids.begin() + static_cast<long>(n) - 1);
      s.output = ids[n - 1];
      return s;
    };
    auto flat = [](const SavedTensors& s) {
      std::vector<int> ids = s.saved;
      ids.push_back(s.output);
      return ids;
    };
    const MemoryCategory saved_category =
        call == MemoryCall::kBlockRecompute ? MemoryCategory::kRecompute : MemoryCategory::kActivations;
    MemoryTemplate recorded = RecordMemoryCall(present, saved_category, [&](MemoryScript& s, const std::vector<int>& in) {
      switch (call) {
        case MemoryCall::kEmbeddingForward: return flat(EmbeddingForward(shape_, s));
        case MemoryCall::kBlockForward: return flat(BlockForward(shape_, /*keep_graph=*/true, s));
        case MemoryCall::kBlockForwardNoGraph: return flat(BlockForward(shape_, /*keep_graph=*/false, s));
        case MemoryCall::kHeadForward: return flat(HeadForward(shape_, OutputMatrixParams(), s));
        case MemoryCall::kBlockRecompute: return flat(BlockRecompute(shape_, saved_of(in, in.size()), s));
        case MemoryCall::kHeadBackward: return std::vector<int>{HeadBackward(shape_, saved_of(in, in.size()), s)};
        case MemoryCall::kBlockBackward:
          return std::vector<int>{BlockBackward(shape_, saved_of(in, in.size() - 1), in.back(), s)};
        case MemoryCall::kEmbeddingBackward:
          EmbeddingBackward(shape_, saved_of(in, in.size() - 1), in.back(),
                            static_cast<double>(plan_.model.EmbeddingParams()), s);
          return std::vector<int>{};
      }
      return std::vector<int>{};
    });
    recordings_.push_back({call, std::move(present), std::move(recorded)});
    it = recordings_.end() - 1;
  }
  return it->events;
}

int ProgramBuilder::Add(StepOp op) {
  op.id = static_cast<int>(p_.ops.size());
  op.deps.erase(std::remove(op.deps.begin(), op.deps.end(), -1), op.deps.end());
  std::sort(op.deps.begin(), op.deps.end());
  op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
  p_.ops.push_back(std::move(op));
  return p_.ops.back().id;
}

StepProgram BuildStepProgram(const Plan& plan, const HardwareProfile& profile, bool op_names) {
  StepProgram program = ProgramBuilder(plan, profile, op_names).Build();
  ToIssueOrder(program);
  return program;
}

}  // namespace llmplan
