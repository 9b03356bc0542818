// CountDocumentPieces (see document_pieces.h): one pass over the windows and
// the document starts together.
#include "data/document_pieces.h"

namespace llmplan::data {

namespace {

// Causal tiles of a sequence of `tokens` tokens: n (n + 1) / 2 for n tiles.
double CausalTiles(int64_t tokens) {
  const double n = static_cast<double>((tokens + kAttentionTile - 1) / kAttentionTile);
  return n * (n + 1) / 2;
}

}  // namespace

DocumentPieces CountDocumentPieces(const DocumentIndex& index, int64_t seq_len) {
  DocumentPieces out;
  out.windows = (index.tokens() - 1) / seq_len;
  out.longer_than_window = index.CountLongerThan(seq_len);
  const std::vector<int64_t>& starts = index.starts();
  const double whole = CausalTiles(seq_len);
  double work_sum = 0;
  size_t next = 0;  // the first document start after the current window's first token
  for (int64_t w = 0; w < out.windows; ++w) {
    const int64_t begin = w * seq_len, end = begin + seq_len;
    while (next < starts.size() && starts[next] <= begin) ++next;
    double tiles = 0;
    int64_t piece_begin = begin;
    for (; next < starts.size() && starts[next] < end; ++next) {
      tiles += CausalTiles(starts[next] - piece_begin);
      piece_begin = starts[next];
      ++out.pieces;
    }
    tiles += CausalTiles(end - piece_begin);
    ++out.pieces;
    work_sum += tiles / whole;
  }
  if (out.windows > 0) {
    out.attention_work = work_sum / static_cast<double>(out.windows);
    out.mean_piece_tokens = static_cast<double>(out.windows * seq_len) / static_cast<double>(out.pieces);
  }
  return out;
}

}  // namespace llmplan::data
