// The planner CLI against input a careless or hostile user gives it (issue 11,
// "bad input and faults"): paths that are not files (/dev/zero, a FIFO), files
// too large to be a config, absurd global batches, a sequence longer than the
// model's maximum. Each must fail in one line with exit status 2 — never hang
// or fill memory — so every command runs under `timeout` and a memory limit.
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/plan_search.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::CliResult;
using testing::RunShell;
using testing::ScratchDir;

// `llmplan <args>` killed after `seconds` (exit 124) and limited to 2 GiB of
// address space, so a hang or runaway allocation fails the test instead of
// the machine.
CliResult Bounded(const std::string& args, const ScratchDir& dir, int seconds = 20) {
  return RunShell("ulimit -v 2097152; exec timeout -s KILL " + std::to_string(seconds) + " '" + LLMPLAN_BINARY +
                      "' " + args,
                  dir);
}

// Exit status 2 and exactly one line "llmplan: ..." containing `expected`.
void ExpectOneLine(const CliResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("llmplan: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << "expected \"" << expected << "\" in: " << r.err;
}

TEST(BadInputTest, InputPathsThatAreNotFilesAreRefusedAtOnce) {
  ScratchDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectOneLine(Bounded("estimate --gpu cpu --gpus 1 --model /dev/zero", dir),
                "model config: '/dev/zero' is a character device, not a regular file");
  ExpectOneLine(Bounded("estimate --gpu cpu --gpus 1 --model '" + fifo + "'", dir), "is a FIFO, not a regular file");
  ExpectOneLine(Bounded("estimate --model tiny-llama --gpus 1 --gpu /dev/zero", dir), "profile: '/dev/zero' is");
  ExpectOneLine(Bounded("estimate --model tiny-llama --gpus 1 --gpu '" + fifo + "'", dir), "is a FIFO");
  ExpectOneLine(Bounded("simulate --plan /dev/zero", dir), "plan: '/dev/zero' is a character device");
  ExpectOneLine(Bounded("simulate --plan '" + fifo + "'", dir), "plan: '" + fifo + "' is a FIFO");
  // A sparse file of 65 MiB: refused by its size, before a byte is read.
  const std::string big = dir.File("big.json");
  std::filesystem::resize_file(dir.Write("big.json", "{"), (int64_t{65} << 20));
  ExpectOneLine(Bounded("simulate --plan '" + big + "'", dir), "is over 64 MiB");
  ExpectOneLine(Bounded("estimate --gpu cpu --gpus 1 --model '" + big + "'", dir), "is over 64 MiB");
}

TEST(BadInputTest, UnknownKernelChoiceIsRefused) {
  ScratchDir dir;
  ExpectOneLine(Bounded("estimate --model tiny-llama --gpus 1 --gpu cpu --kernels fast", dir),
                "--kernels must be fused or composite (got 'fast')");
}

TEST(BadInputTest, AbsurdGlobalBatchesFailInOneLineNamingTheLimit) {
  ScratchDir dir;
  const std::string base = "estimate --model llama3-8b --gpu h100-sxm-80g ";
  // 2^63 - 25: not a multiple of 8 GPUs (the default).
  ExpectOneLine(Bounded(base + "--global-batch 9223372036854775783", dir), "is not a multiple of 8 GPUs");
  // Not a walk over every divisor candidate up to sqrt(2^63) (minutes).
  const std::string limit = "over the 123136 the search can try for llama3-8b (micro-batch <= 256 x grad-accum <= 481)";
  ExpectOneLine(Bounded(base + "--global-batch 9223372036854775783 --gpus 1", dir), limit);
  ExpectOneLine(Bounded(base + "--global-batch 9223372036854775776 --gpus 8", dir), limit);
  ExpectOneLine(Bounded(base + "--global-batch 9223372036854775776 --gpus auto", dir), "the search can try");
  ExpectOneLine(Bounded(base + "--global-batch-tokens 1e30", dir), "--global-batch-tokens must be");
  // Pinned: up to Plan's MaxGradAccum (7710 for 32 blocks), then refused.
  ExpectOneLine(Bounded(base + "--global-batch 65536 --gpus 8 --micro-batch 1 --grad-accum 8192", dir),
                "grad-accum <= 7710");
}

TEST(BadInputTest, NumbersThatAreNotNumbersOrOutOfRangeAreOneLine) {
  // NaN compares false with every bound, so a range check written as
  // `if (x < lo || x > hi)` lets it through into the plan.
  ScratchDir dir;
  const std::string base = "estimate --model tiny-llama --gpus 1 --gpu cpu ";
  ExpectOneLine(Bounded(base + "--lr nan", dir), "--lr");
  ExpectOneLine(Bounded(base + "--lr -1", dir), "learning rate in (0, 1)");
  ExpectOneLine(Bounded(base + "--lr 0", dir), "learning rate in (0, 1)");
  ExpectOneLine(Bounded(base + "--warmup-steps -5", dir), "--warmup-steps");
  ExpectOneLine(Bounded(base + "--decay-steps -5", dir), "--decay-steps");
  ExpectOneLine(Bounded(base + "--global-batch-tokens nan", dir), "--global-batch-tokens");
  ExpectOneLine(Bounded(base + "--global-batch-tokens inf", dir), "--global-batch-tokens");
  ExpectOneLine(Bounded("estimate --model tiny-llama --gpu cpu --gpus 1000000000", dir),
                "--gpus 1000000000 is more GPUs than llmplan plans for (at most 1048576)");
}

TEST(BadInputTest, LargeGlobalBatchIsABoundedSearch) {
  // 8,192 sequences per GPU: simulating steps of up to 8,192 micro-batches
  // would take 1.8 GB and 4 s each, hundreds of them. Micro-batches needing
  // over SearchGradAccumLimit are skipped, and the answer says so.
  ScratchDir dir;
  CliResult r = Bounded("estimate --model llama3-8b --gpu h100-sxm-80g --global-batch 65536 --gpus 8", dir, 120);
  ExpectOneLine(r, "smaller micro-batches need over 481 micro-batches per step and were not tried");
  EXPECT_EQ(SearchGradAccumLimit(PresetModel("llama3-8b")), 481);
  EXPECT_EQ(MaxGradAccum(PresetModel("llama3-8b")), 7710);
}

TEST(BadInputTest, PlanWithTooManyMicroBatchesIsRefused) {
  ScratchDir dir;
  Plan p;
  p.model = PresetModel("llama3-8b");
  p.profile = "h100-sxm-80g";
  p.gpus = 8;
  NormaliseGrouping(p);
  p.seq_len = 4096;
  p.grad_accum = 65536;  // 14 GB to simulate
  nlohmann::json j = PlanToJson(p);
  ExpectOneLine(Bounded("simulate --plan '" + dir.Write("p.json", j.dump()) + "'", dir),
                "plan: grad_accum 65536 is over 7710, the most micro-batches a step of llama3-8b may hold");
}

TEST(BadInputTest, SequenceLongerThanTheModelsMaximumIsRefused) {
  ScratchDir dir;
  ExpectOneLine(Bounded("estimate --model tiny-llama --gpu cpu --gpus 1 --seq 2048", dir),
                "sequence length 2048 is above tiny-llama's max_position_embeddings (1024): use 1024 tokens or less");
  // Without --seq: 4096, or the model's maximum when smaller.
  CliResult ok = Bounded("estimate --model tiny-llama --gpu cpu --gpus 1 --json", dir);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["plan"]["seq_len"], 1024);
  // A plan edited by hand is caught where every plan is validated.
  Plan p;
  p.model = PresetModel("tiny-llama");
  p.profile = "cpu";
  NormaliseGrouping(p);
  p.seq_len = 2048;
  ExpectOneLine(Bounded("simulate --plan '" + dir.Write("p.json", PlanToJson(p).dump()) + "'", dir),
                "plan: seq_len 2048 is above tiny-llama's max_position_embeddings (1024); plan again with a sequence length of 1024");
}

}  // namespace
}  // namespace llmplan
