// MemoryModel (see memory_model.h). Each function follows the executor's
// code statement by statement; the comments name the statement.
#include "planner/memory_model.h"

#include "base/block_kernel_shapes.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace llmplan {

int TensorRegistry::Add(MemoryCategory category, double bytes) {
  const int id = static_cast<int>(tensors_.size());
  tensors_.push_back({category, bytes, id});
  live_.push_back(1);
  return id;
}

MemoryDelta TensorRegistry::Remove(int id) {
  if (id < 0 || id >= static_cast<int>(tensors_.size()) || !live_[id])
    throw std::logic_error("memory model: tensor " + std::to_string(id) + " is not live");
  live_[id] = 0;
  return {tensors_[id].category, -tensors_[id].bytes, id};
}

int MemoryScript::Alloc(MemoryCategory category, double bytes) {
  if (bytes <= 0) return -1;
  if (category == MemoryCategory::kActivations) category = saved_category;
  const int id = registry_.Add(category, bytes);
  events.push_back({category, bytes, id});
  return id;
}

void MemoryScript::Free(int id) {
  if (id < 0) return;
  events.push_back(registry_.Remove(id));
}

void MemoryScript::FreeAll(std::vector<int>& ids) {
  FreeAll(std::span<const int>(ids));
  ids.clear();
}

void MemoryScript::FreeAll(std::span<const int> ids) {
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) Free(*it);
}

ActivationShape ShapeOf(const ModelSpec& m, int64_t micro_batch, int64_t seq_len, int compute_bytes,
                        int64_t loss_chunk_tokens, bool cpu_device, bool fused_kernels) {
  ActivationShape a;
  a.batch = static_cast<double>(micro_batch);
  a.seq = static_cast<double>(seq_len);
  a.tokens = a.batch * a.seq;
  a.hidden = static_cast<double>(m.hidden);
  a.q = static_cast<double>(m.q_dim());
  a.kv = static_cast<double>(m.kv_dim());
  a.inter = static_cast<double>(m.intermediate);
  a.heads = static_cast<double>(m.heads);
  a.kv_heads = static_cast<double>(m.kv_heads);
  a.vocab = static_cast<double>(m.vocab);
  a.compute_bytes = compute_bytes;
  a.loss_chunk = static_cast<double>(loss_chunk_tokens);
  a.fused_attention = !cpu_device;
  a.fused_kernels = fused_kernels && !cpu_device && BlockKernelsFit(compute_bytes, m.hidden, m.head_dim);
  return a;
}

ActivationShape ShapeOfPlan(const Plan& plan, bool cpu_device) {
  ActivationShape a = ShapeOf(plan.model, plan.micro_batch, plan.seq_len, DTypeBytes(plan.param_dtype),
                              plan.loss_chunk_tokens, cpu_device, plan.fused_kernels);
  if (plan.attention == AttentionSpan::kDocuments) {
    a.documents = true;
    // torch_compat.h DocumentAttentionUsesFlash: bf16 on a GPU, heads a
    // multiple of 8 wide up to 256.
    const int64_t d = plan.model.head_dim;
    a.document_mask = cpu_device || plan.param_dtype != DType::kBF16 || d % 8 != 0 || d > 256;
    a.attention_work = a.document_mask ? 1.0 : plan.document_attention_work;
  }
  a.trained_fraction = plan.trained_fraction;
  return a;
}

namespace {

constexpr MemoryCategory kSaved = MemoryCategory::kActivations;
constexpr MemoryCategory kTemp = MemoryCategory::kWorkspace;

// Per-micro-batch tensor sizes in bytes.
struct Sizes {
  explicit Sizes(const ActivationShape& a)
      : c(a.compute_bytes),
        H(c * a.hidden * a.tokens),
        F(4 * a.hidden * a.tokens),
        R(4 * a.tokens),
        Q(c * a.q * a.tokens),
        KV(c * a.kv * a.tokens),
        I(c * a.inter * a.tokens),
        L(4 * a.heads * a.tokens),
        fp32(c == 4),
        fused(a.fused_kernels) {}
  double c, H, F, R, Q, KV, I, L;
  bool fp32;   // compute in fp32: .to(kFloat) is the tensor itself
  bool fused;  // the fused block kernels, not LibTorch's composite ops
};

// RmsNorm(x, w) = w * (xf * rsqrt(mean(xf^2) + eps)).to(dtype), xf =
// x.to(float) (executor/model/block_ops.h). Returns the output; `saved` gets
// what autograd keeps. The fused kernel keeps x itself (the caller's tensor,
// saved by the caller where nothing else holds it) and one fp32 number per row.
int RmsNorm(const Sizes& z, bool keep_graph, MemoryScript& s, std::vector<int>& saved) {
  if (z.fused) {
    const int inv = s.Alloc(keep_graph ? kSaved : kTemp, z.R);
    const int out = s.Alloc(kSaved, z.H);
    if (keep_graph) {
      saved.push_back(inv);
    } else {
      s.Free(inv);
    }
    return out;
  }
  // at::Tensor xf = x.to(at::kFloat);   (x itself when already fp32)
  const int xf = z.fp32 ? -1 : s.Alloc(kSaved, z.F);
  // at::Tensor inv_rms = at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  const std::array<int, 3> temps = {s.Alloc(kTemp, z.F), s.Alloc(kTemp, z.R), s.Alloc(kTemp, z.R)};
  const int inv = s.Alloc(kSaved, z.R);
  s.FreeAll(temps);
  // return weight * (xf * inv_rms).to(x.scalar_type());
  const int prod = s.Alloc(z.fp32 ? kSaved : kTemp, z.F);
  const int normed = z.fp32 ? prod : s.Alloc(kSaved, z.H);
  const int out = s.Alloc(kSaved, z.H);
  if (keep_graph) {
    if (!z.fp32) s.Free(prod);
    for (int id : {xf, inv, normed}) if (id >= 0) saved.push_back(id);
  } else {
    if (!z.fp32) s.Free(normed);
    s.Free(prod);
    s.Free(inv);
    s.Free(xf);
  }
  return out;
}

// ApplyRope(x) = x * cos + RotateHalf(x) * sin, RotateHalf = cat(-x2, x1).
// Returns the rotated tensor; `x` (the projection's output) is freed when
// its variable is reassigned. The fused kernel writes the output directly and
// saves nothing but the (shared) cos and sin tables.
int Rope(const Sizes& z, double bytes, int x, MemoryScript& s) {
  if (z.fused) {
    const int out = s.Alloc(kSaved, bytes);
    s.Free(x);
    return out;
  }
  const int xc = s.Alloc(kTemp, bytes);               // x * cos
  const int neg = s.Alloc(kTemp, bytes / 2);          // -x.narrow(...)
  const int rotated = s.Alloc(kTemp, bytes);          // at::cat(...)
  s.Free(neg);                                        // end of RotateHalf's statement
  const int rs = s.Alloc(kTemp, bytes);               // RotateHalf(x) * sin
  const int sum = s.Alloc(kSaved, bytes);             // ... + ...
  s.Free(rs);
  s.Free(rotated);
  s.Free(xc);
  s.Free(x);
  return sum;
}

// The block's body up to (not including) the final residual add; returns
// {h, mlp}. Everything autograd keeps goes to `saved` (with keep_graph), the
// rest is freed where C++ frees it; `locals` gets the variables still alive
// until the function returns.
struct BlockLocals {
  std::vector<int> locals;  // freed at return (reverse order), unless saved
  std::vector<int> statement_temps;  // fused, no graph: the return statement's temporaries
  int h = -1, mlp = -1;
};

BlockLocals BlockBody(const ActivationShape& a, const Sizes& z, bool keep_graph, MemoryScript& s,
                      std::vector<int>& saved) {
  BlockLocals b;
  // Attention.
  const int hn = RmsNorm(z, keep_graph, s, saved);
  int q = -1, k = -1, v = -1;
  if (z.fused) {
    // QkvRope(PackedLinear(hn, {q, k, v})): the packed projection, q and k
    // rotated and v copied out of it; it dies at the statement's end.
    const int packed = s.Alloc(kTemp, z.Q + 2 * z.KV);
    q = s.Alloc(kSaved, z.Q);
    k = s.Alloc(kSaved, z.KV);
    v = s.Alloc(keep_graph ? kSaved : kTemp, z.KV);
    s.Free(packed);
  } else {
    q = s.Alloc(kTemp, z.Q);
    k = s.Alloc(kTemp, z.KV);
    v = s.Alloc(keep_graph ? kSaved : kTemp, z.KV);
    q = Rope(z, z.Q, q, s);
    k = Rope(z, z.KV, k, s);
  }
  std::vector<int> attention_locals;
  int attn = -1;
  if (a.fused_attention) {
    // scaled_dot_product_attention: the output, and the log-sum-exp when a
    // backward will need it. Its output is laid out [B, T, H, D], so the
    // transpose back to [B, T, H*D] is a view.
    attn = s.Alloc(keep_graph ? kSaved : kTemp, z.Q);
    if (keep_graph) saved.push_back(s.Alloc(kSaved, z.L));
  } else {
    // LibTorch 1.13's plain attention (torch_compat.h CausalAttention).
    const double groups = a.heads / a.kv_heads;
    const double scores = z.c * a.batch * a.heads * a.seq * a.seq;
    const int ke = groups > 1 ? s.Alloc(kSaved, z.Q) : -1;  // repeat_interleave
    const int ve = groups > 1 ? s.Alloc(kSaved, z.Q) : -1;
    const int raw = s.Alloc(kTemp, scores);  // matmul(q, ke^T)
    const int scaled = s.Alloc(kTemp, scores);  // * scale
    s.Free(raw);
    // The causal mask, made per block: ones({t, t}, bool), .triu(1) kept by
    // masked_fill. With documents the layout's mask serves every block.
    int future = -1;
    if (!a.documents) {
      const int ones = s.Alloc(kTemp, a.seq * a.seq);
      future = s.Alloc(kSaved, a.seq * a.seq);
      s.Free(ones);
    }
    const int masked = s.Alloc(kTemp, scores);
    s.Free(scaled);
    const int probs32 = s.Alloc(kSaved, scores / z.c * 4);  // softmax(.., kFloat): kept by its backward
    const int probs = z.fp32 ? probs32 : s.Alloc(kSaved, scores);
    const int out = s.Alloc(kTemp, z.Q);  // matmul(probs, ve)
    for (int id : {ke, ve, future, probs32}) if (id >= 0) attention_locals.push_back(id);
    if (!z.fp32) attention_locals.push_back(probs);
    s.Free(masked);
    // attn.transpose(1, 2).reshape(...): [B, H, T, D] is not [B, T, H*D]: a copy.
    attn = s.Alloc(keep_graph ? kSaved : kTemp, z.Q);
    s.Free(out);
    if (keep_graph) {
      for (int id : attention_locals) saved.push_back(id);
      attention_locals.clear();
    } else {
      s.FreeAll(attention_locals);
    }
  }
  if (z.fused) {
    b.h = s.Alloc(kTemp, z.H);  // AddProjection(x, attn, o): the GEMM writes x + attn o^T
  } else {
    // at::Tensor h = x + at::linear(attn, p[b.o]);
    const int o = s.Alloc(kTemp, z.H);
    b.h = s.Alloc(kTemp, z.H);
    s.Free(o);
  }
  if (z.fused && keep_graph) {
    // The fused post-attention norm saves its input h for its backward.
    saved.push_back(b.h);
    b.h = -1;
  }
  // SwiGLU MLP. Every intermediate lives to the end of its statement, and
  // autograd keeps them. Composite: at::linear(SwiGlu(at::linear(mn, gate),
  // at::linear(mn, up)), down): up, gate, silu(gate), the product, then the
  // projection, all before the residual add. Fused: AddProjection(h,
  // SwiGluPacked(PackedLinear(mn, {gate, up})), down): the packed gate/up and
  // the product, in the statement that makes the block's output (the
  // caller's: BlockForward).
  const int mn = RmsNorm(z, keep_graph, s, saved);
  std::vector<int> mlp_temps;
  if (z.fused) {
    mlp_temps = {s.Alloc(kSaved, 2 * z.I), s.Alloc(kSaved, z.I)};  // gate/up, product
  } else {
    mlp_temps = {s.Alloc(kSaved, z.I), s.Alloc(kSaved, z.I), s.Alloc(kSaved, z.I), s.Alloc(kSaved, z.I)};
    b.mlp = s.Alloc(kTemp, z.H);
  }
  if (keep_graph) {
    // The down projection's input (the product) last: its backward runs first.
    for (int id : {hn, q, k, v, attn, mn}) saved.push_back(id);
    for (int id : mlp_temps) saved.push_back(id);
  } else {
    if (z.fused) {
      b.statement_temps = std::move(mlp_temps);
    } else {
      s.FreeAll(mlp_temps);
    }
    b.locals = {hn, q, k, v, attn, mn};
  }
  return b;
}

}  // namespace

SavedTensors EmbeddingForward(const ActivationShape& a, MemoryScript& s) {
  SavedTensors out;
  if (a.documents) {
    // The micro-batch's attention layout (attention_layout.h DocumentLayout):
    // its int32 buffer copied up, cos and sin gathered per token, and the
    // mask where attention runs under one.
    const double head_dim = a.heads > 0 ? a.q / a.heads : 0;
    out.saved.push_back(s.Alloc(kSaved, 4 * (3 * a.tokens + 1)));
    out.saved.push_back(s.Alloc(kSaved, a.compute_bytes * a.tokens * head_dim));  // cos
    out.saved.push_back(s.Alloc(kSaved, a.compute_bytes * a.tokens * head_dim));  // sin
    if (a.document_mask) {
      const int key = s.Alloc(kTemp, 4 * a.seq);                           // arange(T)
      out.saved.push_back(s.Alloc(kSaved, a.batch * a.seq * a.seq));       // key < first: [B, T, T] bool
      const int later = s.Alloc(kTemp, a.seq * a.seq);                     // key > query: [1, T, T]
      s.Free(later);
      s.Free(key);
    }
  }
  out.output = s.Alloc(kSaved, a.compute_bytes * a.hidden * a.tokens);  // at::embedding(weight, tokens)
  return out;
}

SavedTensors BlockForward(const ActivationShape& a, bool keep_graph, MemoryScript& s) {
  const Sizes z(a);
  SavedTensors out;
  out.saved.reserve(24);  // 17 with fused attention, 21 with the plain one
  BlockLocals b = BlockBody(a, z, keep_graph, s, out.saved);
  out.output = s.Alloc(kSaved, z.H);  // return h + mlp;  (fused: AddProjection(h, ...))
  s.FreeAll(b.statement_temps);
  s.Free(b.mlp);  // then the locals die: mlp, ..., h
  s.FreeAll(b.locals);
  s.Free(b.h);
  return out;
}

SavedTensors BlockRecompute(const ActivationShape& a, const SavedTensors& previous, MemoryScript& s) {
  SavedTensors out = BlockForward(a, /*keep_graph=*/true, s);
  s.Free(previous.output);  // a.output = the new output
  return out;
}

SavedTensors HeadForward(const ActivationShape& a, double matrix_params, MemoryScript& s) {
  const Sizes z(a);
  SavedTensors out;
  // at::Tensor normed = model_.FinalNorm(...): its output is no one's saved tensor.
  const int normed = RmsNorm(z, /*keep_graph=*/true, s, out.saved);
  // ChunkedCrossEntropy: the gradients it returns in backward are made here.
  // Fused form: the weight's is added into its unit's flat gradient, which
  // the program allocates at this op's start (no buffer of the loss's own).
  out.saved.push_back(s.Alloc(kSaved, z.H));                                // grad_hidden = empty_like(hidden)
  if (!z.fused) out.saved.push_back(s.Alloc(kSaved, z.c * matrix_params));  // grad_weight = zeros_like(weight)
  const int loss_sum = s.Alloc(kTemp, 4);
  const double chunk = std::min(a.loss_chunk, a.tokens) * a.vocab;
  if (z.fused) {
    // One chunk (the largest): its logits in the compute dtype, turned into
    // their gradient in place by the kernel, and one fp32 loss per token.
    const int logits = s.Alloc(kTemp, z.c * chunk);
    const int row_loss = s.Alloc(kTemp, 4 * std::min(a.loss_chunk, a.tokens));
    s.Free(row_loss);
    s.Free(logits);
  } else {
    // One chunk (the largest; the others repeat it): logits in fp32, the
    // log-sum-exp's (logits - max) temporary, then the gradient in the compute dtype.
    const int matmul = z.fp32 ? -1 : s.Alloc(kTemp, z.c * chunk);  // at::mm(h, weight.t())
    const int logits = s.Alloc(kTemp, 4 * chunk);                  // .to(at::kFloat)
    if (!z.fp32) s.Free(matmul);
    const int maxes = s.Alloc(kTemp, 4 * chunk / a.vocab);
    const int shifted = s.Alloc(kTemp, 4 * chunk);  // (self - maxes).exp_()
    const int lse = s.Alloc(kTemp, 4 * chunk / a.vocab);
    s.Free(shifted);
    s.Free(maxes);
    const int dlogits = z.fp32 ? -1 : s.Alloc(kTemp, z.c * chunk);  // logits.to(hidden.scalar_type())
    s.Free(dlogits);
    s.Free(lse);
    s.Free(logits);
  }
  out.output = s.Alloc(kSaved, 4);  // the micro-batch's loss
  s.Free(loss_sum);
  s.Free(normed);  // Forward returns: `normed` dies
  return out;
}

SavedTensors HeadEvaluate(const ActivationShape& a, MemoryScript& s) {
  const Sizes z(a);
  SavedTensors out;
  std::vector<int> none;
  const int normed = RmsNorm(z, /*keep_graph=*/false, s, none);
  // ChunkedCrossEntropy with neither input requiring a gradient: one chunk's
  // logits at a time and the loss, no gradient buffers.
  const int loss_sum = s.Alloc(kTemp, 4);
  const double rows = std::min(a.loss_chunk, a.tokens);
  const double chunk = rows * a.vocab;
  if (z.fused) {
    // The kernel reads the compute-dtype logits and writes one fp32 loss per row.
    const int logits = s.Alloc(kTemp, z.c * chunk);
    const int row_loss = s.Alloc(kTemp, 4 * rows);
    s.Free(row_loss);
    s.Free(logits);
  } else {
    // at::mm(h, weight.t()).to(at::kFloat), then at::logsumexp's max and
    // (logits - max) temporary, and the target's logit.
    const int matmul = z.fp32 ? -1 : s.Alloc(kTemp, z.c * chunk);
    const int logits = s.Alloc(kTemp, 4 * chunk);
    if (!z.fp32) s.Free(matmul);
    const int maxes = s.Alloc(kTemp, 4 * rows);
    const int shifted = s.Alloc(kTemp, 4 * chunk);
    const int lse = s.Alloc(kTemp, 4 * rows);
    s.Free(shifted);
    s.Free(maxes);
    const int picked = s.Alloc(kTemp, 4 * rows);
    s.Free(picked);
    s.Free(lse);
    s.Free(logits);
  }
  out.output = s.Alloc(kSaved, 4);  // the micro-batch's loss
  s.Free(loss_sum);
  s.Free(normed);
  return out;
}

int BlockBackward(const ActivationShape& a, const SavedTensors& forward, int flowing, MemoryScript& s) {
  const Sizes z(a);
  // The highest point is the MLP's backward, when every other saved tensor is
  // still held: the down projection's input gradient replaces its saved input,
  // then the product's two input gradients (measured on H200: +2 x [tokens, inter]).
  // The fused form's SwiGLU writes its two input gradients as one packed
  // tensor (the packed gate/up projection's gradient).
  std::vector<int> saved = forward.saved;
  const int grad_product = s.Alloc(kTemp, z.I);
  s.Free(saved.back());  // the down projection's input, released once its node has run
  saved.pop_back();
  std::vector<int> grad_pair;  // of gate and up
  if (z.fused) {
    grad_pair = {s.Alloc(kTemp, 2 * z.I)};
  } else {
    grad_pair = {s.Alloc(kTemp, z.I), s.Alloc(kTemp, z.I)};
  }
  s.Free(grad_product);
  s.FreeAll(saved);
  s.FreeAll(grad_pair);
  const int sent = s.Alloc(kSaved, z.H);  // the input's gradient, for the unit below
  s.Free(flowing);                        // grad_flowing_[mb] replaced
  s.Free(forward.output);                 // activations_.erase: the output's last reference
  return sent;
}

int HeadBackward(const ActivationShape& a, const SavedTensors& forward, MemoryScript& s) {
  const Sizes z(a);
  // forward.saved = {the norm's (xf, inv, normed; fused: inv), grad_hidden,
  // and in the composite form grad_weight}.
  std::vector<int> saved = forward.saved;
  if (!z.fused) {
    s.Free(saved.back());  // grad_weight: added in place into the flat gradient, then dropped
    saved.pop_back();
  }
  const int grad_hidden = saved.back();
  saved.pop_back();
  if (z.fused) {
    // The fused norm's backward: its input's gradient and the weight
    // gradient's fp32 partial sums (block_kernels.h), then the incoming
    // gradient dies.
    const int partials = s.Alloc(kTemp, 4 * a.hidden * std::min(a.tokens, static_cast<double>(kRmsNormBackwardMaxPartials)));
    const int sent = s.Alloc(kSaved, z.H);
    s.Free(partials);
    s.Free(grad_hidden);
    s.FreeAll(saved);
    s.Free(forward.output);
    return sent;
  }
  // The final norm's backward: mixed-precision temporaries a few [tokens, hidden] wide.
  const int t1 = s.Alloc(kTemp, z.H);
  s.Free(grad_hidden);
  const int t2 = s.Alloc(kTemp, z.F), t3 = s.Alloc(kTemp, z.F);
  s.Free(t1);
  const int sent = s.Alloc(kSaved, z.H);
  s.Free(t3);
  s.Free(t2);
  s.FreeAll(saved);
  s.Free(forward.output);
  return sent;
}

void EmbeddingBackward(const ActivationShape& a, const SavedTensors& forward, int flowing, double table_params,
                       MemoryScript& s) {
  // embedding_dense_backward: a dense [vocab, hidden] gradient, added into the
  // flat gradient; while it scatters, the sorted indices and fp32 partial sums
  // over [tokens, hidden] (+10% for the segments' partials; measured on H200).
  const int dense = s.Alloc(kTemp, a.compute_bytes * table_params);
  const int indices = s.Alloc(kTemp, 3 * 8 * a.tokens);
  const int partials = s.Alloc(kTemp, 1.1 * 4 * a.hidden * a.tokens);
  s.Free(partials);
  s.Free(indices);
  s.Free(dense);
  s.Free(flowing);
  s.Free(forward.output);
  s.FreeAll(forward.saved);  // the attention layout (documents), its last reader done
}

double CheckpointStagingBytesPerRank(const StepProgram& program) {
  double elements = 0;
  for (const Unit& u : program.units) elements += static_cast<double>(u.padded_params / u.group_size);
  return 12 * elements;  // fp32 master + m + v
}

double CheckpointStagingBytesPerGpu(const Plan& plan, const StepProgram& program) {
  const int on_node = plan.GpusOnNode();
  const int staging_on_first_node = std::min(plan.shard_group_size, on_node);
  return CheckpointStagingBytesPerRank(program) * staging_on_first_node / on_node;
}

}  // namespace llmplan
