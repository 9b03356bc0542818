// AttentionLayout (see attention_layout.h): the spans on the host, the layout
// on the device.
#include "executor/model/attention_layout.h"

#include <algorithm>

#include <ATen/ATen.h>

namespace llmplan::executor {

AttentionLayout WindowLayout(const RopeTable& window) {
  AttentionLayout layout;
  layout.rope = window;
  return layout;
}

DocumentSpans FindDocumentSpans(const at::Tensor& starts, bool pin) {
  TORCH_CHECK(starts.dim() == 2 && starts.scalar_type() == at::kBool && starts.device().is_cpu(),
              "FindDocumentSpans: starts must be a bool [B, T] tensor on the host");
  const int64_t batch = starts.size(0), seq_len = starts.size(1), n = batch * seq_len;
  TORCH_CHECK(3 * n + 1 <= INT32_MAX, "FindDocumentSpans: ", n, " tokens do not fit int32 offsets");
  DocumentSpans spans;
  spans.batch = batch;
  spans.seq_len = seq_len;
  spans.host_buffer = at::empty({3 * n + 1}, at::TensorOptions().dtype(at::kInt).pinned_memory(pin));
  int32_t* position = spans.host_buffer.data_ptr<int32_t>();
  int32_t* first = position + n;
  int32_t* cu = position + 2 * n;
  const at::Tensor contiguous = starts.contiguous();
  const bool* begins = contiguous.data_ptr<bool>();
  int64_t pieces = 0, longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t begin = 0;  // column of the current piece's first token
    for (int64_t t = 0; t < seq_len; ++t) {
      const int64_t token = b * seq_len + t;
      if (t == 0 || begins[token]) {
        if (t > 0) longest = std::max(longest, t - begin);
        begin = t;
        cu[pieces++] = static_cast<int32_t>(token);
      }
      position[token] = static_cast<int32_t>(t - begin);
      first[token] = static_cast<int32_t>(begin);
    }
    longest = std::max(longest, seq_len - begin);
  }
  // The unused tail reads as empty pieces ending at the last token: harmless
  // to any reader that overruns `pieces`.
  std::fill(cu + pieces, cu + n + 1, static_cast<int32_t>(n));
  spans.pieces = pieces;
  spans.longest_piece = longest;
  return spans;
}

AttentionLayout DocumentLayout(const DocumentSpans& spans, const RopeTable& window, const at::Device& device,
                               bool masked) {
  const int64_t n = spans.batch * spans.seq_len, t = spans.seq_len;
  TORCH_CHECK(window.cos.size(0) >= t, "DocumentLayout: the RoPE table holds ", window.cos.size(0),
              " positions, the window ", t);
  AttentionLayout layout;
  layout.documents = true;
  // One copy (a fresh buffer on the CPU as well: the planner counts it here).
  layout.buffer = spans.host_buffer.to(device, at::kInt, /*non_blocking=*/true, /*copy=*/true);
  const at::Tensor position = layout.buffer.narrow(0, 0, n);
  layout.rope.cos = window.cos.index_select(0, position);
  layout.rope.sin = window.sin.index_select(0, position);
  layout.cu_seqlens = layout.buffer.narrow(0, 2 * n, spans.pieces + 1);
  layout.pieces = spans.pieces;
  layout.longest_piece = spans.longest_piece;
  if (masked) {
    // Key j is hidden from query i when it lies before i's document's first
    // token or after i: [B, T, T], then the second condition or-ed in place.
    const at::Tensor first = layout.buffer.narrow(0, n, n).view({spans.batch, t, 1});
    const at::Tensor key = at::arange(t, layout.buffer.options());
    at::Tensor hidden = key.view({1, 1, t}).lt(first);
    {
      const at::Tensor later = key.view({1, 1, t}).gt(key.view({1, t, 1}));
      hidden.logical_or_(later);
    }
    layout.hidden = hidden.unsqueeze(1);
  }
  return layout;
}

}  // namespace llmplan::executor
