// ProgramBuilder, forward phase: gather each unit's parameters, run its
// forward, release what backward will gather again (see program_builder.h).
#include <algorithm>
#include <cmath>

#include "planner/program_builder.h"

namespace llmplan {

BlockActivationBytes BlockActivations(const ModelSpec& m, int64_t micro_batch, int64_t seq_len) {
  // bf16 tensors that autograd keeps for one block's backward, per token:
  //   RMSNorm input + output (x2 norms)       4 * 2h
  //   q (after RoPE), k, v for attention       2 * (q + 2 kv)
  //   attention output (o_proj input)          2 * q
  //   gate, up, silu(gate)*up (down input)     3 * 2i
  // plus fp32 per-token: two RMSNorm 1/rms and attention's logsumexp per head.
  // Fused attention keeps no s x s matrix.
  const double t = static_cast<double>(micro_batch) * static_cast<double>(seq_len);
  const double h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), i = m.intermediate;
  BlockActivationBytes a;
  a.full = t * (8 * h + 2 * (q + 2 * kv) + 2 * q + 6 * i + 4 * 2 + 4 * m.heads);
  a.checkpointed = t * 2 * h;  // the block's input only
  // Transient inside backward: gradients of the MLP intermediates (gate, up,
  // their product) and of q/k/v, plus one hidden-size gradient in flight.
  a.working = t * (3 * 2 * i + 2 * (q + 2 * kv) + 2 * 2 * h);
  return a;
}

int ProgramBuilder::Gather(int u, int mb, bool backward) {
  const double bytes = ParamBytes() * Padded(u);
  std::vector<int> deps;
  const size_t k = gathers_.size();
  const size_t limit = static_cast<size_t>(plan_.prefetch_depth) + 1;
  if (k >= limit && k - limit < releases_.size()) deps.push_back(releases_[k - limit]);
  deps.push_back(last_release_of_unit_[u]);  // the unit's buffer is reused
  const bool params_offloaded = OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload);
  if (params_offloaded) {
    // The bf16 shard streams in from the host just before its gather.
    StepOp copy;
    copy.kind = OpKind::kCopyToDevice;
    copy.stream = StreamKind::kHostToDevice;
    copy.unit = u;
    copy.micro_batch = mb;
    copy.name = "h2d params " + UnitName(u) + (backward ? " bwd" : "") + MbSuffix(mb);
    copy.work.copy_bytes = bytes / G();
    copy.alloc_at_start.push_back({MemoryCategory::kOffloadStaging, bytes / G()});
    copy.deps = deps;
    deps.push_back(Add(copy));
  }
  StepOp op;
  op.kind = OpKind::kAllGather;
  op.stream = StreamKind::kGather;
  op.group = CommGroup::kShard;
  op.unit = u;
  op.micro_batch = mb;
  op.name = "all-gather " + UnitName(u) + (backward ? " bwd" : "") + MbSuffix(mb);
  op.deps = deps;
  op.work.collective = CollectiveOp::kAllGather;
  op.work.collective_bytes = bytes;
  op.work.group_size = G();
  op.work.spans_nodes = GroupSpansNodes(G());
  // On one GPU the "gather" is the fp32 -> bf16 cast of the master shard.
  if (G() == 1) {
    op.work.elementwise_bytes = Padded(u) * (4 + ParamBytes());
    op.work.launches = 1;
  }
  op.alloc_at_start.push_back({MemoryCategory::kGatheredParams, bytes});
  if (params_offloaded) op.free_at_end.push_back({MemoryCategory::kOffloadStaging, -bytes / G()});
  const int id = Add(op);
  gathers_.push_back(id);
  return id;
}

int ProgramBuilder::Release(int u, int mb, int after, bool backward) {
  StepOp op;
  op.kind = OpKind::kRelease;
  op.stream = StreamKind::kCompute;
  op.unit = u;
  op.micro_batch = mb;
  op.name = "release " + UnitName(u) + (backward ? " bwd" : "") + MbSuffix(mb);
  op.deps = {after};
  op.free_at_end.push_back({MemoryCategory::kGatheredParams, -ParamBytes() * Padded(u)});
  const int id = Add(op);
  releases_.push_back(id);
  last_release_of_unit_[u] = id;
  return id;
}

// Per-unit compute work for forward (backward is derived from it).
void ProgramBuilder::FillForwardWork(int u, OpWork& w) const {
  const ModelSpec& m = plan_.model;
  const double t = Tokens(), s = static_cast<double>(plan_.seq_len), b = static_cast<double>(plan_.micro_batch);
  const double h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), i = m.intermediate;
  switch (U(u).kind) {
    case UnitKind::kEmbedding:
      w.elementwise_bytes = t * h * ParamBytes() * 2;
      w.launches = 2;
      break;
    case UnitKind::kBlock:
      w.gemm_flops = 2 * t * (h * q + 2 * h * kv + q * h + 3 * h * i);
      // Most FLOPs sit in the q/o and MLP GEMMs, whose smallest side is h or t.
      w.gemm_min_dim = std::min(t, h);
      w.attention_flops = 2 * b * s * s * q;  // QK^T and PV, causal half
      // RMSNorm x2, RoPE on q/k, SiLU*up, two residual adds, bf16 r/w.
      w.elementwise_bytes = t * 2 * (4 * h + 2 * (q + kv) + 3 * i + 6 * h);
      w.launches = 24;
      break;
    case UnitKind::kHead:
      w.gemm_flops = 2 * t * h * m.vocab;
      w.gemm_min_dim = std::min(t, h);
      // fp32 logits written and read by the loss, chunk by chunk.
      w.elementwise_bytes = t * m.vocab * 4 * 3 + t * h * 4;
      w.launches = 8 * static_cast<int>(std::ceil(t / static_cast<double>(plan_.loss_chunk_tokens)));
      break;
  }
}

double ProgramBuilder::StoredBytes(int u) const {
  const double t = Tokens(), h = plan_.model.hidden;
  switch (U(u).kind) {
    case UnitKind::kEmbedding: return 0;  // its output is block 0's saved input
    case UnitKind::kBlock: {
      auto a = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len);
      return plan_.IsCheckpointed(U(u).layer) ? a.checkpointed : a.full;
    }
    case UnitKind::kHead: return t * (2 * h + 4 * h);  // final-norm input + d(hidden) from the fused loss
  }
  return 0;
}

double ProgramBuilder::LogitsBytes() const {
  // One chunk of fp32 logits, its gradient and the bf16 matmul output.
  const double chunk = std::min<double>(plan_.loss_chunk_tokens, Tokens());
  return chunk * static_cast<double>(plan_.model.vocab) * (4 + 4 + 2);
}

void ProgramBuilder::Forward(int mb) {
  const int n = NumUnits();
  for (int u = 0; u < n; ++u) {
    if (GathersParams()) gather_fwd_[u] = Gather(u, mb, false);
    StepOp op;
    op.kind = OpKind::kForward;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = "forward " + UnitName(u) + MbSuffix(mb);
    FillForwardWork(u, op.work);
    op.deps = {GathersParams() ? gather_fwd_[u] : -1, u > 0 ? last_forward_[u - 1] : -1};
    const double stored = StoredBytes(u);
    if (stored > 0) op.alloc_at_start.push_back({MemoryCategory::kActivations, stored});
    if (U(u).kind == UnitKind::kBlock) {
      // Forward transients (MLP intermediates before the down projection).
      const double working = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len).working / 2;
      op.alloc_at_start.push_back({MemoryCategory::kWorkspace, working});
      op.free_at_end.push_back({MemoryCategory::kWorkspace, -working});
    } else if (U(u).kind == UnitKind::kHead) {
      op.alloc_at_start.push_back({MemoryCategory::kLogits, LogitsBytes()});
      op.free_at_end.push_back({MemoryCategory::kLogits, -LogitsBytes()});
    }
    last_forward_[u] = Add(op);
    if (U(u).kind == UnitKind::kHead) last_loss_ = last_forward_[u];
    if (GathersParams() && !KeepsParamsThroughBackward(u)) Release(u, mb, last_forward_[u], false);
  }
}

}  // namespace llmplan
