// Document pieces: how a token file's documents fall into the training
// windows of seq_len tokens (executor/data/batch_loader.h: window w holds
// inputs [w seq_len, (w + 1) seq_len)), and what attention kept inside them
// costs. A window's pieces are its runs of tokens from one document: each
// document start inside it begins one, and so does the window's first token.
//
// The cost is counted the way FlashAttention computes causal attention: in
// tiles of kAttentionTile queries by kAttentionTile keys, each piece on its
// own (the variable-length kernel starts every sequence at a fresh tile), so
// a piece of n tiles costs n (n + 1) / 2 of them whatever its last tile's
// fill. A window of short documents therefore costs more than the sum of
// their squared lengths says, as the kernel does.
#pragma once

#include <cstdint>

#include "data/document_index.h"

namespace llmplan::data {

// Query and key rows of FlashAttention-2's forward tile on the GPUs
// llmplan profiles (Hopper and Ampere at head widths 64 and 128).
inline constexpr int64_t kAttentionTile = 128;

struct DocumentPieces {
  int64_t windows = 0;             // (tokens - 1) / seq_len, as the loader cuts them
  int64_t pieces = 0;              // over all windows
  double mean_piece_tokens = 0;    // tokens per piece
  // Mean over the windows of (causal tiles inside the window's pieces) /
  // (causal tiles of the whole window): the attention work of a window
  // under document attention relative to a whole window's. Below 1 for any
  // window of several pieces of a few tiles each; above 1 where pieces end
  // in nearly empty tiles (a window of 4 tiles cut into 88 + 424 tokens
  // costs 1 + 10 tiles to the whole window's 10). Plan::document_attention_work.
  double attention_work = 1;
  int64_t longer_than_window = 0;  // documents with more than seq_len tokens: cut across windows
};

// REQUIRES: index.tokens() > seq_len >= 1.
DocumentPieces CountDocumentPieces(const DocumentIndex& index, int64_t seq_len);

}  // namespace llmplan::data
