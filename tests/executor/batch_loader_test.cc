// BatchLoader: the sample order is a permutation and deterministic, ranks
// partition the global stream, resuming (also at another world size) continues
// exactly, several workers hand out the one-worker stream, and a bad token id
// (or a file that shrinks) surfaces as the consumer's error.
#include "executor/data/batch_loader.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/user_error.h"

namespace llmplan::data {
namespace {

class BatchLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_batch_loader_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Raw uint16 file whose token i is i % modulus: a row's content tells where
  // it came from.
  std::string WriteCounting(const std::string& name, int64_t n, int64_t modulus = 60000) {
    std::vector<uint16_t> tokens(n);
    for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i % modulus);
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), n * 2);
    return path;
  }

  BatchLoaderOptions Options(const std::string& path) {
    BatchLoaderOptions o;
    o.path = path;
    o.seq_len = 8;
    o.micro_batch = 2;
    o.vocab = 60000;
    o.seed = 1234;
    o.prefetch = 3;
    return o;
  }

  std::filesystem::path dir_;
};

TEST(SampleOrderTest, EachEpochIsAPermutationOfAllWindows) {
  for (int64_t windows : {1, 2, 3, 7, 64, 1000, 4097}) {
    SampleOrder order(windows * 16 + 1, 16, 99, /*shuffle=*/true);
    ASSERT_EQ(order.num_windows(), windows);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::set<int64_t> seen;
      for (int64_t i = 0; i < windows; ++i) seen.insert(order.Window(epoch * windows + i));
      EXPECT_EQ(static_cast<int64_t>(seen.size()), windows);
      EXPECT_EQ(*seen.begin(), 0);
      EXPECT_EQ(*seen.rbegin(), windows - 1);
    }
  }
}

TEST(SampleOrderTest, ShuffledDiffersBySeedAndEpochButIsReproducible) {
  SampleOrder a(100001, 100, 1, true), a_again(100001, 100, 1, true), b(100001, 100, 2, true);
  std::vector<int64_t> wa, wb, wa2, epoch1;
  for (int64_t i = 0; i < 50; ++i) {
    wa.push_back(a.Window(i));
    wa2.push_back(a_again.Window(i));
    wb.push_back(b.Window(i));
    epoch1.push_back(a.Window(1000 + i));
  }
  EXPECT_EQ(wa, wa2);
  EXPECT_NE(wa, wb);
  EXPECT_NE(wa, epoch1);
  // Window w starts at token w * seq_len; windows overlap by one token.
  EXPECT_EQ(a.FirstToken(7), a.Window(7) * 100);
  SampleOrder sequential(100001, 100, 1, false);
  EXPECT_EQ(sequential.Window(5), 5);
  EXPECT_EQ(sequential.Window(1003), 3);  // epoch 1 starts over
  EXPECT_EQ(sequential.Epoch(1003), 1);
}

TEST_F(BatchLoaderTest, SequentialRowsAreWindowsWithSharedBoundaryToken) {
  BatchLoaderOptions o = Options(WriteCounting("c.u16", 8 * 10 + 1));
  o.shuffle = false;
  BatchLoader loader(o, DataPosition{});
  EXPECT_EQ(loader.order().num_windows(), 10);
  TokenBatch b = loader.Next();
  ASSERT_EQ(b.tokens.sizes(), (std::vector<int64_t>{2, 9}));
  EXPECT_EQ(b.tokens.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.tokens.is_pinned(), torch::cuda::is_available());
  for (int64_t k = 0; k < 9; ++k) {
    EXPECT_EQ(b.tokens[0][k].item<int64_t>(), k);
    EXPECT_EQ(b.tokens[1][k].item<int64_t>(), 8 + k);
  }
  EXPECT_EQ(b.first_sample, 0);
  EXPECT_EQ(b.next.next_sample, 2);
  EXPECT_EQ(loader.position().next_sample, 2);
}

TEST_F(BatchLoaderTest, DeterministicAcrossLoaders) {
  const std::string path = WriteCounting("d.u16", 8 * 50 + 1);
  BatchLoader first(Options(path), DataPosition{});
  BatchLoader second(Options(path), DataPosition{});
  for (int i = 0; i < 40; ++i) {  // 80 samples: crosses into the second epoch
    EXPECT_TRUE(torch::equal(first.Next().tokens, second.Next().tokens)) << "batch " << i;
  }
}

TEST_F(BatchLoaderTest, RanksPartitionTheGlobalStreamAndResumeAtAnotherWorldSize) {
  const std::string path = WriteCounting("r.u16", 8 * 64 + 1);
  // Reference: one rank, micro-batch 4: the global sample stream 0..15.
  BatchLoaderOptions single = Options(path);
  single.micro_batch = 4;
  BatchLoader reference(single, DataPosition{});
  std::vector<torch::Tensor> stream;
  for (int i = 0; i < 4; ++i) stream.push_back(reference.Next().tokens);
  const torch::Tensor global = torch::cat(stream);  // 16 rows

  // Two ranks, micro-batch 2: call i gives rank r rows 4i + 2r, 4i + 2r + 1.
  std::vector<std::unique_ptr<BatchLoader>> ranks;
  for (int r = 0; r < 2; ++r) {
    BatchLoaderOptions o = Options(path);
    o.rank = r;
    o.world = 2;
    ranks.push_back(std::make_unique<BatchLoader>(o, DataPosition{}));
  }
  for (int i = 0; i < 2; ++i) {
    for (int r = 0; r < 2; ++r) {
      TokenBatch b = ranks[r]->Next();
      EXPECT_TRUE(torch::equal(b.tokens, global.slice(0, 4 * i + 2 * r, 4 * i + 2 * r + 2))) << i << " " << r;
      EXPECT_EQ(b.next.next_sample, 4 * (i + 1));
    }
  }
  // Resume the 2-rank run's position (8 samples) on 4 ranks with micro-batch 1:
  // they see global samples 8..11, then 12..15.
  const DataPosition saved = ranks[0]->position();
  EXPECT_EQ(saved.next_sample, 8);
  for (int r = 0; r < 4; ++r) {
    BatchLoaderOptions o = Options(path);
    o.rank = r;
    o.world = 4;
    o.micro_batch = 1;
    BatchLoader resumed(o, saved);
    EXPECT_TRUE(torch::equal(resumed.Next().tokens, global.slice(0, 8 + r, 9 + r)));
    EXPECT_TRUE(torch::equal(resumed.Next().tokens, global.slice(0, 12 + r, 13 + r)));
  }
}

TEST_F(BatchLoaderTest, BadTokenIdIsFoundBeforeTheFirstBatchWithFileAndOffset) {
  // Token 100 at index 37; vocab 50. The loader scans every token a sample
  // can read when it opens the file, so the error comes from the constructor,
  // before any step — not when a batch reaches the token.
  std::vector<uint16_t> tokens(8 * 20 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 37);
  tokens[37] = 100;
  const std::string path = (dir_ / "bad.u16").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  BatchLoaderOptions o = Options(path);
  o.shuffle = false;
  o.vocab = 50;
  try {
    BatchLoader loader(o, DataPosition{});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("token id 100 at token 37"), std::string::npos) << message;
    EXPECT_NE(message.find("byte offset 74"), std::string::npos) << message;
    EXPECT_NE(message.find("vocab size 50"), std::string::npos) << message;
  }
}

TEST_F(BatchLoaderTest, BadTokenNearTheEndOfALargeFileIsFoundUpFront) {
  // 3 M tokens (several scan blocks, several threads): the first bad id is
  // the one reported, whichever thread finds its block first.
  std::vector<uint16_t> tokens(3'000'001);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 500);
  tokens[2'999'000] = 600;
  tokens[2'999'500] = 700;
  const std::string path = (dir_ / "late.u16").string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  BatchLoaderOptions o = Options(path);
  o.vocab = 512;
  try {
    BatchLoader loader(o, DataPosition{});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 600 at token 2999000 (byte offset 5998000)"), std::string::npos)
        << e.what();
  }
  TokenFile file(path);
  for (int threads : {1, 2, 3, 8}) {
    EXPECT_EQ(file.FindTokenAtLeast(512, file.size(), threads), 2'999'000) << threads << " threads";
    EXPECT_EQ(file.FindTokenAtLeast(701, file.size(), threads), -1) << threads << " threads";
    EXPECT_EQ(file.FindTokenAtLeast(650, file.size(), threads), 2'999'500) << threads << " threads";
    EXPECT_EQ(file.FindTokenAtLeast(512, 2'999'000, threads), -1) << "the end is exclusive";
  }
  // A bad id in the tail no window reaches (here: the last token of a file
  // cut into windows of 8 that leave one token over) is not an error.
  std::vector<uint16_t> tail(8 * 4 + 2, 1);
  tail.back() = 9999;
  const std::string tail_path = (dir_ / "tail.u16").string();
  std::ofstream(tail_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tail.data()), static_cast<std::streamsize>(tail.size() * 2));
  BatchLoaderOptions t = Options(tail_path);
  t.vocab = 512;
  EXPECT_NO_THROW(BatchLoader(t, DataPosition{}));
}

TEST_F(BatchLoaderTest, DestructorStopsAFullQueue) {
  // The workers fill the queue and block; destroying the loader must not hang.
  BatchLoaderOptions o = Options(WriteCounting("s.u16", 8 * 100 + 1));
  o.prefetch = 1;
  { BatchLoader loader(o, DataPosition{}); }
  { BatchLoader loader(o, DataPosition{}); loader.Next(); }
  o.prefetch = 3;
  o.workers = 3;
  { BatchLoader loader(o, DataPosition{}); loader.Next(); }
  SUCCEED();
}

TEST_F(BatchLoaderTest, SeveralWorkersHandOutTheSameBatchesInOrder) {
  // Workers finish in any order; Next() must still return the one-worker
  // stream, batch for batch, across epochs, on every rank and from a resumed
  // position.
  const std::string path = WriteCounting("w.u16", 8 * 37 + 1);
  for (const int64_t start : {int64_t{0}, int64_t{10}}) {
    for (int r = 0; r < 2; ++r) {
      BatchLoaderOptions one = Options(path);
      one.rank = r;
      one.world = 2;
      BatchLoaderOptions three = one;
      three.workers = 3;
      three.prefetch = 5;
      BatchLoader a(one, DataPosition{start}), b(three, DataPosition{start});
      for (int i = 0; i < 60; ++i) {  // 240 samples: more than six epochs of 37 windows
        const TokenBatch x = a.Next(), y = b.Next();
        ASSERT_TRUE(torch::equal(x.tokens, y.tokens)) << "start " << start << " rank " << r << " batch " << i;
        EXPECT_EQ(x.first_sample, y.first_sample);
        EXPECT_EQ(b.position().next_sample, a.position().next_sample);
      }
    }
  }
}

TEST_F(BatchLoaderTest, SeveralWorkersStopAtAFailedBatchAndKeepFailing) {
  // The file shrinks while the workers read it: every batch Next() returns
  // before the error is the right one, the error names the shrink, later
  // calls fail too, and the loader stops without hanging.
  const std::string path = WriteCounting("shrink.u16", 8 * 4000 + 1);
  BatchLoaderOptions o = Options(path);
  o.shuffle = false;  // batch i reads windows 2i, 2i + 1: its content says which it is
  o.workers = 3;
  o.prefetch = 3;
  BatchLoader loader(o, DataPosition{});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(loader.Next().tokens[0][0].item<int64_t>(), 2 * i * 8 % 60000);
  std::filesystem::resize_file(path, 2 * 8 * 20);
  int64_t taken = 5;
  try {
    for (;; ++taken) {
      const TokenBatch b = loader.Next();
      ASSERT_EQ(b.tokens[0][0].item<int64_t>(), 2 * taken * 8 % 60000) << "batch " << taken << " out of order";
      ASSERT_LT(taken, 4000) << "never failed";
    }
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("shrank"), std::string::npos) << e.what();
  }
  EXPECT_THROW(loader.Next(), UserError);
}

TEST_F(BatchLoaderTest, MoreWorkersThanPrefetchIsRefused) {
  BatchLoaderOptions o = Options(WriteCounting("p.u16", 8 * 10 + 1));
  o.workers = 4;
  o.prefetch = 2;
  try {
    BatchLoader loader(o, DataPosition{});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--loader-workers must be between 1 and --loader-prefetch (2), got 4"),
              std::string::npos)
        << e.what();
  }
  o.workers = 0;
  EXPECT_THROW(BatchLoader(o, DataPosition{}), UserError);
}

TEST_F(BatchLoaderTest, FileShorterThanOneSampleAndBadOptions) {
  BatchLoaderOptions o = Options(WriteCounting("tiny.u16", 8));
  try {
    BatchLoader loader(o, DataPosition{});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one sample"), std::string::npos) << e.what();
  }
  BatchLoaderOptions bad_rank = Options(WriteCounting("ok.u16", 100));
  bad_rank.rank = 2;
  bad_rank.world = 2;
  EXPECT_THROW(BatchLoader(bad_rank, DataPosition{}), UserError);
}

}  // namespace
}  // namespace llmplan::data
