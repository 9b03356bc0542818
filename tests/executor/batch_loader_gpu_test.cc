// BatchLoader on a CUDA machine: batches come back page-locked, so the
// host-to-device copy is asynchronous, and the copied tokens are the ones read.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tests/executor/gpu_test_support.h"

#include "executor/data/batch_loader.h"

namespace llmplan::data {
namespace {

TEST(BatchLoaderGpuTest, PinnedBatchesCopyAsynchronously) {
  ASSERT_TRUE(at::hasCUDA());
  std::string pattern = (std::filesystem::temp_directory_path() / "llmplan_loader_gpu_XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const std::string path = pattern + "/tokens.u16";
  std::vector<uint16_t> tokens(128 * 64 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7919) % 50000);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));

  BatchLoaderOptions options;
  options.path = path;
  options.seq_len = 128;
  options.micro_batch = 4;
  options.vocab = 50000;
  {
    BatchLoader loader(options, DataPosition{});
    EXPECT_TRUE(loader.pinned());
    for (int i = 0; i < 8; ++i) {
      TokenBatch batch = loader.Next();
      EXPECT_TRUE(batch.tokens.is_pinned());
      at::Tensor on_gpu = batch.tokens.to(at::kCUDA, /*non_blocking=*/true);
      EXPECT_TRUE(at::equal(on_gpu.cpu(), batch.tokens));
    }
  }
  llmplan::gpu_test::RemoveTree(pattern);
}

}  // namespace
}  // namespace llmplan::data
