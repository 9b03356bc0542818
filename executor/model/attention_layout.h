// AttentionLayout: which tokens of a micro-batch attend to which, and at
// which positions they are rotated. Two layouts:
//
//   window     every row of [B, T] is one sequence: token t attends to tokens
//              0..t of its row at position t (the shared [T, D] RoPE table).
//   documents  a packed window holds several documents (data/document_index.h):
//              each token attends only to the tokens of its own document up
//              to itself, and its position counts from its document's first
//              token in the window (a document cut by the window's start
//              begins again at 0, as if it were its own sequence). Exactly
//              what running each document as a sequence of its own computes,
//              with none of the padding (the test: tests/executor/
//              document_attention_test.cc).
//
// A documents layout is made once per micro-batch, at its embedding's forward,
// and lives until its embedding's backward (the planner's memory model
// allocates and frees it there: planner/memory_model.cc EmbeddingForward):
//   one int32 buffer of 3 B T + 1 entries, copied to the device in one go:
//     [0, BT)        each token's position in its document
//     [BT, 2 BT)     the row index of its document's first token in the window
//     [2 BT, 3 BT+1) cu_seqlens: piece i is tokens [cu[i], cu[i+1]) of the
//                    flattened [B T] tokens (the pieces never cross rows);
//                    only the first pieces + 1 entries mean anything
//   cos and sin gathered per token, [B T, D] each;
//   and, where attention runs as LibTorch's composite ops rather than flash
//   varlen (compat::DocumentAttentionUsesFlash false: the CPU, fp32), the
//   block-diagonal causal mask, bool [B, 1, T, T], true where a key is hidden.
// Fixed sizes (the buffer holds room for every token to begin a piece): each
// micro-batch allocates the same bytes, so the caching allocator reuses them
// and the planner knows them before the data is read.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace llmplan::executor {

// cos and sin of the rotary embedding: [positions, head_dim], each in the
// compute dtype (HF casts them to the activations' dtype). Row p is position
// p (a window's table), or, in a documents layout, the position of token p of
// the flattened [B T] tokens.
struct RopeTable {
  at::Tensor cos, sin;
};

struct AttentionLayout {
  RopeTable rope;
  bool documents = false;
  // Documents only.
  at::Tensor buffer;      // int32 [3 B T + 1] on the device (layout above)
  at::Tensor cu_seqlens;  // int32 [pieces + 1], a view of buffer
  int64_t pieces = 0;
  int64_t longest_piece = 0;
  at::Tensor hidden;      // bool [B, 1, T, T], true: the key is hidden (composite attention only)
};

// The window layout: the shared table of positions 0..T-1.
AttentionLayout WindowLayout(const RopeTable& window);

// The host half of a documents layout for one micro-batch: `starts`, bool
// [B, T] on the host, true where a token begins a document (column 0 always
// begins one). Pure integer work on the host, done when the batch is loaded
// so the device never waits on it.
struct DocumentSpans {
  at::Tensor host_buffer;  // int32 [3 B T + 1] (layout above), pinned when `pin`
  int64_t batch = 0, seq_len = 0;
  int64_t pieces = 0;
  int64_t longest_piece = 0;
};
DocumentSpans FindDocumentSpans(const at::Tensor& starts, bool pin);

// The device half, at the micro-batch's embedding forward: the buffer copied
// to `device`, cos and sin gathered per token from the window's table, and
// the mask when `masked`.
// REQUIRES: window holds at least spans.seq_len positions.
AttentionLayout DocumentLayout(const DocumentSpans& spans, const RopeTable& window, const at::Device& device,
                               bool masked);

}  // namespace llmplan::executor
