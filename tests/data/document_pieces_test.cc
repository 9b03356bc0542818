// CountDocumentPieces: how a token file's documents fall into the loader's
// windows, and the share of a whole window's causal attention tiles that
// attention inside them computes (Plan::document_attention_work).
#include "data/document_pieces.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llmplan::data {
namespace {

namespace fs = std::filesystem;

class DocumentPiecesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_document_pieces_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An index of documents with these lengths.
  DocumentIndex Index(const std::vector<int64_t>& lengths) {
    const std::string path = (dir_ / ("d" + std::to_string(files_++) + ".docs")).string();
    DocumentIndexWriter writer(path);
    int64_t at = 0;
    for (int64_t length : lengths) {
      writer.StartDocument(at);
      at += length;
    }
    writer.Commit(at);
    return DocumentIndex(path, at);
  }

  fs::path dir_;
  int files_ = 0;
};

// n tiles of a piece cost n (n + 1) / 2.
double Tiles(double n) { return n * (n + 1) / 2; }

TEST_F(DocumentPiecesTest, OneDocumentCostsWholeWindows) {
  const DocumentPieces p = CountDocumentPieces(Index({4 * 512 + 1}), 512);
  EXPECT_EQ(p.windows, 4);
  EXPECT_EQ(p.pieces, 4);
  EXPECT_DOUBLE_EQ(p.attention_work, 1.0);
  EXPECT_DOUBLE_EQ(p.mean_piece_tokens, 512);
  EXPECT_EQ(p.longer_than_window, 1);
}

TEST_F(DocumentPiecesTest, PiecesAreCountedInWholeTiles) {
  // Windows of 1024 tokens (8 tiles). Window 0: documents of 256 and 768
  // tokens (2 and 6 tiles). Window 1: one of 100 (1 tile, however short),
  // then 924 (8 tiles: 924 = 7 x 128 + 28). The last token is a target only.
  const DocumentPieces p = CountDocumentPieces(Index({256, 768, 100, 925}), 1024);
  EXPECT_EQ(p.windows, 2);
  EXPECT_EQ(p.pieces, 4);
  const double whole = Tiles(8);
  EXPECT_DOUBLE_EQ(p.attention_work, ((Tiles(2) + Tiles(6)) / whole + (Tiles(1) + Tiles(8)) / whole) / 2);
  EXPECT_EQ(p.longer_than_window, 0);
}

TEST_F(DocumentPiecesTest, ADocumentCutByAWindowStartsAPieceInTheNext) {
  // 600 + 600 tokens in windows of 512: window 0 is one piece, window 1 has
  // the first document's last 88 tokens and the second's first 424: 1 + 10
  // tiles, more than the whole window's 10.
  const DocumentPieces p = CountDocumentPieces(Index({600, 600}), 512);
  EXPECT_EQ(p.windows, 2);
  EXPECT_EQ(p.pieces, 3);
  EXPECT_DOUBLE_EQ(p.attention_work, (1.0 + (Tiles(1) + Tiles(4)) / Tiles(4)) / 2);
  EXPECT_EQ(p.longer_than_window, 2);
}

TEST_F(DocumentPiecesTest, ShortDocumentsCostFarLessThanTheWindow) {
  std::vector<int64_t> lengths(400, 200);  // 80,000 tokens in documents of 200
  const DocumentPieces p = CountDocumentPieces(Index(lengths), 4096);
  EXPECT_EQ(p.windows, 19);
  // ~20.5 pieces of 2 tiles (3 tiles' work each) over a window's 32 x 33 / 2.
  EXPECT_GT(p.attention_work, 20 * 3 / Tiles(32));
  EXPECT_LT(p.attention_work, 22 * 3 / Tiles(32));
  EXPECT_NEAR(p.mean_piece_tokens, 4096.0 * 19 / static_cast<double>(p.pieces), 1e-9);
}

}  // namespace
}  // namespace llmplan::data
