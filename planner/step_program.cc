// Builds the StepProgram of one optimizer step. Every decision about order,
// prefetch and which collective runs where is made here, once; the simulator
// and the executor only interpret it.
#include "planner/step_program.h"

#include <algorithm>
#include <cmath>
#include <deque>

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
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kCopyToDevice: return "copy_to_device";
    case OpKind::kCopyToHost: return "copy_to_host";
    case OpKind::kOptimizerStep: return "optimizer_step";
    case OpKind::kCpuOptimizerStep: return "cpu_optimizer_step";
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

namespace {

class ProgramBuilder {
 public:
  ProgramBuilder(const Plan& plan, const HardwareProfile& profile) : plan_(plan), profile_(profile) {}

  StepProgram Build() {
    MakeUnits();
    MakePersistent();
    for (int mb = 0; mb < static_cast<int>(plan_.grad_accum); ++mb) {
      Forward(mb);
      Backward(mb);
    }
    OptimizerStep();
    return std::move(p_);
  }

 private:
  const Plan& plan_;
  const HardwareProfile& profile_;
  StepProgram p_;
  // Rate limiter for gathered units (FSDP's limit on all-gathers in flight):
  // gather k waits for release k - (prefetch_depth + 1).
  std::vector<int> gathers_, releases_;
  std::vector<int> last_forward_, gather_fwd_, grad_reduce_;
  // Reduce-scatters in issue order. A backward waits for the reduce-scatter two
  // before it (FSDP2's post-backward waits on the previous one's event), so
  // unsharded gradients cannot pile up when the reduction is slower than compute.
  std::vector<int> reduce_scatters_;

  int G() const { return plan_.shard_group_size; }
  bool Sharded() const { return plan_.strategy != ShardingStrategy::kNoShard; }
  bool GroupSpansNodes(int group) const { return group > plan_.gpus_per_node; }
  double ReduceBytes() const { return DTypeBytes(plan_.reduce_dtype); }
  double ParamBytes() const { return DTypeBytes(plan_.param_dtype); }
  double Tokens() const { return static_cast<double>(plan_.micro_batch * plan_.seq_len); }
  bool TiedEmbedding(int u) const { return plan_.model.tied_embeddings && u == 0; }
  int NumUnits() const { return static_cast<int>(p_.units.size()); }
  const Unit& U(int u) const { return p_.units[u]; }

  std::string UnitName(int u) const {
    switch (U(u).kind) {
      case UnitKind::kEmbedding: return "embed";
      case UnitKind::kHead: return "head";
      case UnitKind::kBlock: return "block " + std::to_string(U(u).layer);
    }
    return "?";
  }

  void MakeUnits() {
    const ModelSpec& m = plan_.model;
    auto add = [&](UnitKind k, int layer, int64_t params) {
      Unit u{k, layer, params, (params + G() - 1) / G() * G()};
      p_.units.push_back(u);
    };
    add(UnitKind::kEmbedding, -1, m.EmbeddingParams());
    for (int l = 0; l < m.layers; ++l) add(UnitKind::kBlock, l, m.ParamsPerBlock());
    add(UnitKind::kHead, -1, m.HeadParams() + m.FinalNormParams());
    p_.tokens_per_micro_batch = plan_.micro_batch * plan_.seq_len;
    p_.micro_batches = static_cast<int>(plan_.grad_accum);
    int n = NumUnits();
    last_forward_.assign(n, -1);
    gather_fwd_.assign(n, -1);
    grad_reduce_.assign(n, -1);
  }

  void MakePersistent() {
    double padded = 0;
    for (const auto& u : p_.units) padded += static_cast<double>(u.padded_params);
    const double shard = padded / G();
    PersistentMemory& pm = p_.persistent;
    HostMemory& host = p_.host;
    const Offload o = plan_.offload;
    // fp32 gradient shard accumulated over micro-batches (the whole gradient
    // when not sharded). With params offloaded it accumulates on the host.
    pm.grad_shards = OffloadsParams(o) && OffloadsOptimizer(o) ? 0 : 4 * shard;
    if (o == Offload::kNone) {
      pm.param_shards = 4 * shard;
      pm.optimizer_state = 8 * shard;
    } else if (o == Offload::kOptimizer) {
      // Master weights and AdamW state live with the CPU optimizer; the GPU keeps
      // the bf16 shard that all-gathers read.
      pm.compute_params = ParamBytes() * shard;
      host.master_params = 4 * shard;
      host.optimizer_state = 8 * shard;
      host.grad_staging = 4 * shard;
      // The CPU step writes the new bf16 shard into pinned memory so the copy
      // up is an asynchronous DMA (the executor's CpuAdamW path does this).
      host.param_staging = ParamBytes() * shard;
    } else if (o == Offload::kParams) {
      // fp32 master on the host, streamed in for the GPU optimizer step; the bf16
      // shard stays for the gathers.
      pm.compute_params = ParamBytes() * shard;
      pm.optimizer_state = 8 * shard;
      host.master_params = 4 * shard;
    } else {  // optimizer + params: nothing per-parameter persists on the GPU
      host.master_params = (4 + ParamBytes()) * shard;
      host.optimizer_state = 8 * shard;
      host.grad_staging = 4 * shard;
    }
    if (!Sharded()) pm.compute_params = ParamBytes() * padded;  // DDP keeps the full bf16 model
    pm.cuda_context = profile_.device_kind == "cuda" ? profile_.cuda_context_bytes : 0;
    pm.workspaces = profile_.workspace_bytes;
    // One communicator per process group this plan uses.
    int comms = plan_.gpus > 1 ? (plan_.strategy == ShardingStrategy::kHybridShard ? 2 : 1) : 0;
    pm.collective_buffers = comms * profile_.collective_buffer_bytes;
  }

  int Add(StepOp op) {
    op.id = static_cast<int>(p_.ops.size());
    op.deps.erase(std::remove(op.deps.begin(), op.deps.end(), -1), op.deps.end());
    std::sort(op.deps.begin(), op.deps.end());
    op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
    p_.ops.push_back(std::move(op));
    return p_.ops.back().id;
  }

  static std::string MbSuffix(int mb) { return " mb " + std::to_string(mb); }

  // Does unit u need an all-gather (or, on one GPU, a cast of its fp32 master
  // into the bf16 compute buffer) before compute?
  bool GathersParams() const { return Sharded(); }

  // Gathered params stay from forward to backward (shard_grad_op; the head,
  // whose backward follows its forward at once; the tied embedding the head uses).
  bool KeepsParamsThroughBackward(int u) const {
    return plan_.strategy == ShardingStrategy::kShardGradOp || U(u).kind == UnitKind::kHead || TiedEmbedding(u);
  }

  int Gather(int u, int mb, bool backward) {
    double bytes = ParamBytes() * static_cast<double>(U(u).padded_params);
    std::vector<int> deps;
    size_t k = gathers_.size();
    size_t limit = static_cast<size_t>(plan_.prefetch_depth) + 1;
    if (k >= limit && k - limit < releases_.size()) deps.push_back(releases_[k - limit]);
    if (OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload)) {
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
      int c = Add(copy);
      deps.push_back(c);
    }
    StepOp op;
    op.kind = OpKind::kAllGather;
    op.stream = StreamKind::kGather;
    op.unit = u;
    op.micro_batch = mb;
    op.name = "all-gather " + UnitName(u) + (backward ? " bwd" : "") + MbSuffix(mb);
    op.deps = deps;
    op.work.collective = CollectiveOp::kAllGather;
    op.work.collective_bytes = bytes;
    op.work.group_size = G();
    op.work.spans_nodes = GroupSpansNodes(G());
    // On one GPU the "gather" is the fp32 -> bf16 cast of the master shard.
    if (G() == 1) op.work.elementwise_bytes = static_cast<double>(U(u).padded_params) * (4 + ParamBytes());
    op.alloc_at_start.push_back({MemoryCategory::kGatheredParams, bytes});
    if (OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload))
      op.free_at_end.push_back({MemoryCategory::kOffloadStaging, -bytes / G()});
    int id = Add(op);
    gathers_.push_back(id);
    return id;
  }

  int Release(int u, int mb, int after, bool backward) {
    StepOp op;
    op.kind = OpKind::kRelease;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = "release " + UnitName(u) + (backward ? " bwd" : "") + MbSuffix(mb);
    op.deps = {after};
    op.free_at_end.push_back({MemoryCategory::kGatheredParams, -ParamBytes() * static_cast<double>(U(u).padded_params)});
    int id = Add(op);
    releases_.push_back(id);
    return id;
  }

  // Per-unit compute work for forward (backward is derived in the cost model).
  void FillForwardWork(int u, OpWork& w) const {
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

  // Saved bytes of unit u between its forward and its backward.
  double StoredBytes(int u) const {
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

  double LogitsBytes() const {
    // One chunk of fp32 logits, its gradient and the bf16 matmul output.
    double chunk = std::min<double>(plan_.loss_chunk_tokens, Tokens());
    return chunk * static_cast<double>(plan_.model.vocab) * (4 + 4 + 2);
  }

  void Forward(int mb) {
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
      double stored = StoredBytes(u);
      if (stored > 0) op.alloc_at_start.push_back({MemoryCategory::kActivations, stored});
      if (U(u).kind == UnitKind::kBlock) {
        // Forward transients (MLP intermediates before the down projection).
        double working = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len).working / 2;
        op.alloc_at_start.push_back({MemoryCategory::kWorkspace, working});
        op.free_at_end.push_back({MemoryCategory::kWorkspace, -working});
      } else if (U(u).kind == UnitKind::kHead) {
        op.alloc_at_start.push_back({MemoryCategory::kLogits, LogitsBytes()});
        op.free_at_end.push_back({MemoryCategory::kLogits, -LogitsBytes()});
      }
      last_forward_[u] = Add(op);
      if (GathersParams() && !KeepsParamsThroughBackward(u)) Release(u, mb, last_forward_[u], false);
    }
  }

  void Backward(int mb) {
    const int n = NumUnits();
    const bool last_mb = mb == plan_.grad_accum - 1;
    int previous = last_forward_[n - 1];
    for (int u = n - 1; u >= 0; --u) {
      bool block = U(u).kind == UnitKind::kBlock;
      // The embedding's backward is a scatter-add of output gradients: it
      // needs no weights, so it is never re-gathered.
      int gathered = -1;
      if (GathersParams()) {
        if (KeepsParamsThroughBackward(u)) gathered = gather_fwd_[u];
        else if (U(u).kind != UnitKind::kEmbedding) gathered = Gather(u, mb, true);
      }
      int recompute = -1;
      if (block && plan_.IsCheckpointed(U(u).layer)) {
        StepOp op;
        op.kind = OpKind::kRecompute;
        op.stream = StreamKind::kCompute;
        op.unit = u;
        op.micro_batch = mb;
        op.name = "recompute " + UnitName(u) + MbSuffix(mb);
        FillForwardWork(u, op.work);
        op.deps = {gathered, previous};
        auto a = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len);
        op.alloc_at_start.push_back({MemoryCategory::kRecompute, a.full - a.checkpointed});
        recompute = Add(op);
      }
      StepOp op;
      op.kind = OpKind::kBackward;
      op.stream = StreamKind::kCompute;
      op.unit = u;
      op.micro_batch = mb;
      op.name = "backward " + UnitName(u) + MbSuffix(mb);
      FillForwardWork(u, op.work);
      op.work.gemm_flops *= 2;  // dX and dW
      op.work.attention_flops *= 2.5;  // flash backward: five matmuls to forward's two
      op.work.attention_backward = true;
      op.work.elementwise_bytes *= 2;
      op.work.launches *= 2;
      op.deps = {gathered, recompute, previous};
      if (reduce_scatters_.size() >= 2) op.deps.push_back(reduce_scatters_[reduce_scatters_.size() - 2]);
      // Unsharded gradients in the compute dtype, then cast for the reduction.
      bool reduced_later = G() > 1;
      auto grad_bytes_of = [&](int unit) {
        double p = static_cast<double>(U(unit).padded_params);
        return ParamBytes() * p + (reduced_later && ReduceBytes() != ParamBytes() ? ReduceBytes() * p : 0);
      };
      double grad_bytes = grad_bytes_of(u);
      // Tied embedding: the head's backward produces the shared matrix's
      // gradient, so the embedding's buffer is allocated there (and freed,
      // as before, by the embedding's own reduction at the end of backward).
      double allocated = TiedEmbedding(u) ? 0 : grad_bytes;
      if (U(u).kind == UnitKind::kHead && plan_.model.tied_embeddings) allocated += grad_bytes_of(0);
      if (allocated > 0) op.alloc_at_start.push_back({MemoryCategory::kGradBuffers, allocated});
      double working = 0;
      if (block) working = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len).working;
      if (U(u).kind == UnitKind::kHead) working = LogitsBytes();
      MemoryCategory wcat = U(u).kind == UnitKind::kHead ? MemoryCategory::kLogits : MemoryCategory::kWorkspace;
      if (working > 0) {
        op.alloc_at_start.push_back({wcat, working});
        op.free_at_end.push_back({wcat, -working});
      }
      double stored = StoredBytes(u);
      if (stored > 0) op.free_at_end.push_back({MemoryCategory::kActivations, -stored});
      if (recompute >= 0) {
        auto a = BlockActivations(plan_.model, plan_.micro_batch, plan_.seq_len);
        op.free_at_end.push_back({MemoryCategory::kRecompute, -(a.full - a.checkpointed)});
      }
      if (!reduced_later) op.free_at_end.push_back({MemoryCategory::kGradBuffers, -grad_bytes});
      int bwd = Add(op);
      previous = bwd;
      if (gathered >= 0) Release(u, mb, bwd, true);
      ReduceGradients(u, mb, bwd, grad_bytes, last_mb);
    }
  }

  void ReduceGradients(int u, int mb, int bwd, double grad_bytes, bool last_mb) {
    double pu = static_cast<double>(U(u).padded_params);
    int reduced = bwd;
    if (G() > 1) {
      StepOp rs;
      rs.kind = OpKind::kReduceScatter;
      rs.stream = StreamKind::kReduce;
      rs.unit = u;
      rs.micro_batch = mb;
      rs.name = "reduce-scatter " + UnitName(u) + MbSuffix(mb);
      rs.deps = {bwd};
      rs.work.collective = CollectiveOp::kReduceScatter;
      rs.work.collective_bytes = ReduceBytes() * pu;
      rs.work.group_size = G();
      rs.work.spans_nodes = GroupSpansNodes(G());
      rs.free_at_end.push_back({MemoryCategory::kGradBuffers, -grad_bytes});
      reduced = Add(rs);
      reduce_scatters_.push_back(reduced);
    }
    int replicas = plan_.ReplicaGroups();
    if (last_mb && replicas > 1) {
      // Across replica groups, once per step (DDP's no_sync for earlier micro-batches).
      StepOp ar;
      ar.kind = OpKind::kAllReduce;
      ar.stream = StreamKind::kReduce;
      ar.unit = u;
      ar.micro_batch = mb;
      ar.name = "all-reduce " + UnitName(u);
      ar.deps = {reduced};
      ar.work.collective = CollectiveOp::kAllReduce;
      ar.work.collective_bytes = 4 * pu / G();
      ar.work.group_size = replicas;
      ar.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
      reduced = Add(ar);
    }
    if (OffloadsParams(plan_.offload) && OffloadsOptimizer(plan_.offload)) {
      // Gradient shards go to the host after every micro-batch (accumulated there).
      StepOp copy;
      copy.kind = OpKind::kCopyToHost;
      copy.stream = StreamKind::kDeviceToHost;
      copy.unit = u;
      copy.micro_batch = mb;
      copy.name = "d2h grads " + UnitName(u) + MbSuffix(mb);
      copy.deps = {reduced};
      copy.work.copy_bytes = 4 * pu / G();
      reduced = Add(copy);
    }
    grad_reduce_[u] = reduced;
  }

  void OptimizerStep() {
    const int n = NumUnits();
    const Offload o = plan_.offload;
    // Clipping needs the global gradient norm: every reduction must finish,
    // then one scalar all-reduce across all GPUs.
    int norm = -1;
    {
      StepOp op;
      op.kind = OpKind::kAllReduce;
      op.stream = StreamKind::kReduce;
      op.name = "all-reduce grad norm";
      for (int u = 0; u < n; ++u) op.deps.push_back(grad_reduce_[u]);
      op.work.collective = CollectiveOp::kAllReduce;
      op.work.collective_bytes = 4;
      op.work.group_size = plan_.gpus;
      op.work.spans_nodes = plan_.gpus > plan_.gpus_per_node;
      norm = Add(op);
    }
    for (int u = 0; u < n; ++u) {
      double shard = static_cast<double>(U(u).padded_params) / G();
      if (!OffloadsOptimizer(o)) {
        int master_in = -1;
        if (OffloadsParams(o)) {
          StepOp in;
          in.kind = OpKind::kCopyToDevice;
          in.stream = StreamKind::kHostToDevice;
          in.unit = u;
          in.name = "h2d master " + UnitName(u);
          // Not before backward is over: a master copied in earlier would sit
          // in its staging buffer through the activation peak.
          in.deps = {norm};
          in.work.copy_bytes = 4 * shard;
          in.alloc_at_start.push_back({MemoryCategory::kOffloadStaging, 4 * shard});
          master_in = Add(in);
        }
        StepOp op;
        op.kind = OpKind::kOptimizerStep;
        op.stream = StreamKind::kCompute;
        op.unit = u;
        op.name = "adamw " + UnitName(u);
        op.deps = {norm, master_in};
        // Fused AdamW reads param, grad, m, v (fp32) and writes param, m, v and
        // the bf16 compute copy: 30 bytes per parameter of HBM traffic.
        op.work.elementwise_bytes = 30 * shard;
        op.work.launches = 1;
        int step = Add(op);
        if (OffloadsParams(o)) {
          StepOp out;
          out.kind = OpKind::kCopyToHost;
          out.stream = StreamKind::kDeviceToHost;
          out.unit = u;
          out.name = "d2h master " + UnitName(u);
          out.deps = {step};
          out.work.copy_bytes = 4 * shard;
          out.free_at_end.push_back({MemoryCategory::kOffloadStaging, -4 * shard});
          Add(out);
        }
        continue;
      }
      int grads_on_host = grad_reduce_[u];
      if (!OffloadsParams(o)) {
        StepOp copy;
        copy.kind = OpKind::kCopyToHost;
        copy.stream = StreamKind::kDeviceToHost;
        copy.unit = u;
        copy.name = "d2h grads " + UnitName(u);
        copy.deps = {grad_reduce_[u]};
        copy.work.copy_bytes = 4 * shard;
        grads_on_host = Add(copy);
      }
      StepOp cpu;
      cpu.kind = OpKind::kCpuOptimizerStep;
      cpu.stream = StreamKind::kCpu;
      cpu.unit = u;
      cpu.name = "cpu adamw " + UnitName(u);
      cpu.deps = {grads_on_host, norm};
      cpu.work.cpu_adam_params = shard;
      int step = Add(cpu);
      if (!OffloadsParams(o)) {
        StepOp back;
        back.kind = OpKind::kCopyToDevice;
        back.stream = StreamKind::kHostToDevice;
        back.unit = u;
        back.name = "h2d params " + UnitName(u);
        back.deps = {step};
        back.work.copy_bytes = ParamBytes() * shard;
        Add(back);
      }
    }
  }
};

}  // namespace

StepProgram BuildStepProgram(const Plan& plan, const HardwareProfile& profile) {
  return ProgramBuilder(plan, profile).Build();
}

}  // namespace llmplan
