// Never lose a run, end to end through `llmplan run` on CPU ranks (Gloo):
// checkpoints resume exactly (bit for bit with the same plan), reshard onto
// another number of ranks and strategy, survive kill -9 at random moments
// and SIGTERM, refuse damaged files, never overwrite an earlier run, and
// round-trip through a Hugging Face directory (export, --init-from).
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "executor/checkpoint/manifest.h"
#include "executor/checkpoint/safetensors.h"
#include "planner/model_spec.h"
#include "tests/cli_runner.h"
#include "tests/executor/gloo_skip.h"
#include "tests/executor/run_test_support.h"

namespace llmplan {
namespace {

namespace fs = std::filesystem;
using executor_test::CommandResult;
using executor_test::RunLlmplan;

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmplan_resume_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Tokens with structure (a model learns them; losses move every step).
    std::vector<uint16_t> tokens(60000);
    std::mt19937 gen(7);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 31 + (i / 97) + gen() % 3) % 250);
    std::ofstream(Path("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A plan for `gpus` CPU ranks with `strategy`, 4 samples of 64 tokens per step.
  // `extra`: more estimate flags (pins).
  std::string MakePlan(int gpus, const std::string& strategy, int micro_batch, const std::string& extra = "") {
    const std::string path = Path("plan-" + std::to_string(gpus) + "-" + strategy +
                                  (extra.empty() ? "" : "-" + std::to_string(std::hash<std::string>{}(extra))) + ".json");
    CommandResult r = RunLlmplan("estimate --model tiny-llama --gpus " + std::to_string(gpus) +
                                 " --gpu cpu --seq 64 --global-batch 4 --micro-batch " + std::to_string(micro_batch) +
                                 " --strategy " + strategy + " --lr 3e-3 --warmup-steps 2 " + extra + " -o " + path);
    EXPECT_EQ(r.status, 0) << r.output;
    return path;
  }
  // A copy of plan file `made` with the optimizer's grad_clip set to `clip`, as `name`.
  std::string WithGradClip(const std::string& made, double clip, const std::string& name) const {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(made));
    j["optimizer"]["grad_clip"] = clip;
    std::ofstream(Path(name)) << j.dump(2);
    return Path(name);
  }
  // `llmplan run` of `plan` for `steps` (total) into `out`, with `extra` flags.
  CommandResult Run(const std::string& plan, int steps, const std::string& out, const std::string& extra = "") {
    return RunLlmplan("run --cpu --plan " + plan + " --data " + Path("tokens.bin") + " --steps " +
                      std::to_string(steps) + " --out " + Path(out) + " " + extra);
  }
  // The losses of metrics.jsonl, whose steps must be first_step, first_step + 1, ...
  static std::vector<double> Losses(const std::string& run_dir, int64_t first_step = 1) {
    std::vector<double> losses;
    std::ifstream in(run_dir + "/metrics.jsonl");
    std::string line;
    int64_t expected_step = first_step;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      EXPECT_EQ(j["step"].get<int64_t>(), expected_step++) << run_dir << ": steps must read as one run";
      losses.push_back(j["loss"].get<double>());
    }
    return losses;
  }
  // Every tensor of two safetensors files: equal bit for bit (tolerance 0) or within `tolerance`.
  static void ExpectSameWeights(const std::string& a, const std::string& b, double tolerance) {
    const auto x = checkpoint::ReadSafetensors(a).tensors, y = checkpoint::ReadSafetensors(b).tensors;
    ASSERT_EQ(x.size(), y.size());
    for (const auto& [name, t] : x) {
      ASSERT_TRUE(y.count(name)) << name;
      if (tolerance == 0) {
        EXPECT_TRUE(torch::equal(t, y.at(name))) << name << " differs";
      } else {
        EXPECT_LE((t - y.at(name)).abs().max().item<double>(), tolerance) << name;
      }
    }
  }
  fs::path dir_;
};

// Interrupted at step 3 and resumed to 6, on 2 ranks with full_shard: the
// same losses and the same final parameters as 6 uninterrupted steps, bit
// for bit (the same plan runs the same float operations in the same order).
TEST_F(ResumeTest, ResumedRunEqualsUninterruptedBitForBit) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan = MakePlan(2, "full_shard", 2);
  CommandResult straight = Run(plan, 6, "straight");
  ASSERT_EQ(straight.status, 0) << straight.output;

  CommandResult first = Run(plan, 3, "resumed", "--ckpt-dir " + Path("ckpt") + " --ckpt-every 2");
  ASSERT_EQ(first.status, 0) << first.output;
  // Saved after step 2 (every 2) and at the end (step 3).
  EXPECT_TRUE(fs::exists(Path("ckpt/step-00000002/manifest.json")));
  EXPECT_TRUE(fs::exists(Path("ckpt/step-00000003/manifest.json")));
  EXPECT_TRUE(fs::exists(Path("ckpt/step-00000003/shard-00001-of-00002.safetensors")));
  CommandResult second = Run(plan, 6, "resumed", "--ckpt-dir " + Path("ckpt") + " --resume");
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from " + Path("ckpt/step-00000003") + " (step 3"), std::string::npos)
      << second.output;

  EXPECT_EQ(Losses(Path("resumed")), Losses(Path("straight")));
  ExpectSameWeights(Path("resumed/final.safetensors"), Path("straight/final.safetensors"), 0);
  const auto summary = nlohmann::json::parse(std::ifstream(Path("resumed/summary.json")));
  EXPECT_EQ(summary["start_step"], 3);
  EXPECT_EQ(summary["steps"], 3);
  // Kept the newest 2 (the default): 3 and 6.
  EXPECT_FALSE(fs::exists(Path("ckpt/step-00000002")));
  EXPECT_TRUE(fs::exists(Path("ckpt/step-00000006/manifest.json")));
}

// With the optimizer offloaded, a step's update is applied by the next step
// (beside its first forward), so a checkpoint taken mid-run must first finish
// the pending update, and the run must go on from there unchanged. Saved at
// step 2 of 4 and resumed from that checkpoint to 6: every loss and the final
// parameters equal 6 uninterrupted steps bit for bit — with the gradients
// staged per unit and through the slots alike, the two forms equal to each
// other, and a checkpoint written under one form resumed under the other.
TEST_F(ResumeTest, OffloadedOptimizerResumesBitForBitFromAMidRunCheckpoint) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  std::map<std::string, std::string> plans;
  for (const std::string form : {"unit", "slots"}) {
    SCOPED_TRACE("offload_staging " + form);
    // A low clip so every step scales its gradients (the scale travels with the pending update).
    const std::string plan = plans[form] = WithGradClip(
        MakePlan(2, "full_shard", 2, "--offload optimizer --offload-staging " + form), 0.05, form + ".plan.json");
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(plan))["offload_staging"], form);
    CommandResult straight = Run(plan, 6, "straight-" + form);
    ASSERT_EQ(straight.status, 0) << straight.output;
    CommandResult first = Run(plan, 4, "first-" + form, "--ckpt-dir " + Path("ckpt-" + form) + " --ckpt-every 2");
    ASSERT_EQ(first.status, 0) << first.output;
    const std::vector<double> all = Losses(Path("straight-" + form));
    ASSERT_EQ(all.size(), 6u);
    EXPECT_EQ(Losses(Path("first-" + form)), std::vector<double>(all.begin(), all.begin() + 4));
    fs::remove_all(Path("ckpt-" + form + "/step-00000004"));  // resume from the mid-run checkpoint
    CommandResult second = Run(plan, 6, "second-" + form, "--ckpt-dir " + Path("ckpt-" + form) + " --resume");
    ASSERT_EQ(second.status, 0) << second.output;
    EXPECT_NE(second.output.find("(step 2"), std::string::npos) << second.output;
    EXPECT_EQ(Losses(Path("second-" + form), 3), std::vector<double>(all.begin() + 2, all.end()));
    ExpectSameWeights(Path("second-" + form + "/final.safetensors"),
                      Path("straight-" + form + "/final.safetensors"), 0);
  }
  EXPECT_EQ(Losses(Path("straight-unit")), Losses(Path("straight-slots")));
  ExpectSameWeights(Path("straight-unit/final.safetensors"), Path("straight-slots/final.safetensors"), 0);
  // Written through the slots, resumed staged per unit, and the other way.
  const std::vector<double> all = Losses(Path("straight-unit"));
  for (const auto& [saved, resumed] : {std::pair<std::string, std::string>{"slots", "unit"}, {"unit", "slots"}}) {
    CommandResult crossed = Run(plans[resumed], 6, "crossed-" + resumed,
                                "--resume-from " + Path("ckpt-" + saved + "/step-00000002"));
    ASSERT_EQ(crossed.status, 0) << crossed.output;
    EXPECT_EQ(Losses(Path("crossed-" + resumed), 3), std::vector<double>(all.begin() + 2, all.end())) << saved;
    ExpectSameWeights(Path("crossed-" + resumed + "/final.safetensors"), Path("straight-unit/final.safetensors"), 0);
  }
}

// Delayed update: a step applies the previous step's gradients while it
// computes, and a checkpoint first finishes the pending update, so the step
// after a checkpoint runs on current parameters — in the run that saved it
// and in a run resumed from it alike. Saved every 2 steps of 4, resumed from
// step 2 to 6: every loss and the final parameters equal 6 uninterrupted
// steps saving at the same steps, bit for bit; and the losses are not those
// of the undelayed plan (step 2 computes on the initial parameters).
TEST_F(ResumeTest, DelayedUpdateResumesBitForBitOnTheSameCheckpointSteps) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan =
      WithGradClip(MakePlan(2, "full_shard", 2, "--offload optimizer --delayed-update"), 0.05, "delayed.plan.json");
  const std::string undelayed =
      WithGradClip(MakePlan(2, "full_shard", 2, "--offload optimizer"), 0.05, "undelayed.plan.json");
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(plan))["delayed_update"].get<bool>());
  CommandResult straight = Run(plan, 6, "straight", "--ckpt-dir " + Path("ckpt-straight") + " --ckpt-every 2");
  ASSERT_EQ(straight.status, 0) << straight.output;
  CommandResult first = Run(plan, 4, "first", "--ckpt-dir " + Path("ckpt") + " --ckpt-every 2");
  ASSERT_EQ(first.status, 0) << first.output;
  const std::vector<double> all = Losses(Path("straight"));
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(Losses(Path("first")), std::vector<double>(all.begin(), all.begin() + 4));
  fs::remove_all(Path("ckpt/step-00000004"));
  CommandResult second = Run(plan, 6, "second", "--ckpt-dir " + Path("ckpt") + " --ckpt-every 2 --resume");
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("(step 2"), std::string::npos) << second.output;
  EXPECT_EQ(Losses(Path("second"), 3), std::vector<double>(all.begin() + 2, all.end()));
  ExpectSameWeights(Path("second/final.safetensors"), Path("straight/final.safetensors"), 0);
  CommandResult plain = Run(undelayed, 2, "undelayed");
  ASSERT_EQ(plain.status, 0) << plain.output;
  const std::vector<double> undelayed_losses = Losses(Path("undelayed"));
  ASSERT_EQ(undelayed_losses.size(), 2u);
  EXPECT_EQ(undelayed_losses[0], all[0]);  // both start on the same parameters
  EXPECT_NE(undelayed_losses[1], all[1]);  // the delayed step 2 has not applied step 1's update
}

// Saved by 2 full_shard ranks; loaded by 1 rank (no_shard) and by 3 ranks
// (shard_grad_op, shards padded differently): each continues to the same
// parameters as the uninterrupted 2-rank run, up to the float rounding of a
// different summation order (sharded_train_test.cc's tolerance).
TEST_F(ResumeTest, ReshardsOntoOtherRanksAndStrategies) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  // fp32 compute: bf16 would turn the summation order's rounding into
  // differences of whole bf16 steps.
  const std::string two = MakePlan(2, "full_shard", 2);
  ASSERT_EQ(Run(two, 5, "straight", "--dtype fp32").status, 0);
  CommandResult first = Run(two, 2, "half", "--dtype fp32 --ckpt-dir " + Path("ckpt"));
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string saved = Path("ckpt/step-00000002");
  for (const auto& [gpus, strategy, micro] : {std::tuple{1, "no_shard", 4}, std::tuple{4, "shard_grad_op", 1}}) {
    const std::string plan = MakePlan(gpus, strategy, micro);
    const std::string out = "from2to" + std::to_string(gpus);
    CommandResult r = Run(plan, 5, out, "--dtype fp32 --resume-from " + saved);
    ASSERT_EQ(r.status, 0) << r.output;
    ExpectSameWeights(Path(out + "/final.safetensors"), Path("straight/final.safetensors"), 2e-5);
    const auto losses = Losses(Path(out), 3), expected = Losses(Path("straight"));
    ASSERT_EQ(losses.size(), 3u);  // steps 3..5 in this run's metrics
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(losses[i], expected[2 + i], 1e-5 * expected[2 + i]);
  }
}

// A plan that keeps the embedding and head whole on every rank
// (--replicate-edges yes): rank 0 alone saves them (one piece each, in its
// file), a resume with the same plan is bit for bit, and the checkpoint
// reshards both ways: onto one rank, and from the plain full_shard one.
TEST_F(ResumeTest, ReplicatedEdgesSaveOnceResumeExactlyAndReshard) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string edges = MakePlan(2, "full_shard", 1, "--replicate-edges yes");
  ASSERT_EQ(Run(edges, 5, "straight", "--dtype fp32").status, 0);
  CommandResult first = Run(edges, 2, "half", "--dtype fp32 --ckpt-dir " + Path("ckpt"));
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string saved = Path("ckpt/step-00000002");
  const auto manifest = nlohmann::json::parse(std::ifstream(saved + "/manifest.json"));
  const auto& units = manifest["units"];
  for (size_t u : {size_t{0}, units.size() - 1}) {
    ASSERT_EQ(units[u]["pieces"].size(), 1u) << units[u]["name"];
    EXPECT_EQ(units[u]["pieces"][0]["file"], "shard-00000-of-00002.safetensors");
  }
  EXPECT_EQ(units[1]["pieces"].size(), 2u);  // a block: one piece per rank
  const auto rank1 = checkpoint::ReadSafetensors(saved + "/shard-00001-of-00002.safetensors").tensors;
  EXPECT_EQ(rank1.count(checkpoint::ShardTensorName(0, "master")), 0u) << "rank 1 saved the whole embedding again";

  CommandResult again = Run(edges, 5, "resumed", "--dtype fp32 --resume-from " + saved);
  ASSERT_EQ(again.status, 0) << again.output;
  const std::vector<double> straight = Losses(Path("straight"));
  EXPECT_EQ(Losses(Path("resumed"), 3), std::vector<double>(straight.begin() + 2, straight.end()));
  ExpectSameWeights(Path("resumed/final.safetensors"), Path("straight/final.safetensors"), 0);

  CommandResult one = Run(MakePlan(1, "no_shard", 4), 5, "onto1", "--dtype fp32 --resume-from " + saved);
  ASSERT_EQ(one.status, 0) << one.output;
  ExpectSameWeights(Path("onto1/final.safetensors"), Path("straight/final.safetensors"), 2e-5);

  const std::string plain = MakePlan(2, "full_shard", 1);
  ASSERT_EQ(Run(plain, 2, "plain_half", "--dtype fp32 --ckpt-dir " + Path("plain_ckpt")).status, 0);
  CommandResult into = Run(edges, 5, "into_edges", "--dtype fp32 --resume-from " + Path("plain_ckpt/step-00000002"));
  ASSERT_EQ(into.status, 0) << into.output;
  ExpectSameWeights(Path("into_edges/final.safetensors"), Path("straight/final.safetensors"), 2e-5);
}

// Gathers that cast the fp32 master (--cast-at-gather yes) keep no bf16
// shard to save or restore: a resume is bit for bit, equal to the plan that
// keeps the shards, and each form resumes the other's checkpoint exactly.
TEST_F(ResumeTest, CastAtGatherResumesBitForBitAndEqualsTheKeptShards) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string cast = MakePlan(2, "full_shard", 2, "--cast-at-gather yes --offload none");
  const std::string kept = MakePlan(2, "full_shard", 2, "--cast-at-gather no --offload none");
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(cast)).value("cast_at_gather", false), true);
  ASSERT_EQ(Run(kept, 5, "straight").status, 0);
  CommandResult first = Run(cast, 2, "half", "--ckpt-dir " + Path("ckpt"));
  ASSERT_EQ(first.status, 0) << first.output;
  CommandResult again = Run(cast, 5, "resumed", "--resume-from " + Path("ckpt/step-00000002"));
  ASSERT_EQ(again.status, 0) << again.output;
  const std::vector<double> straight = Losses(Path("straight"));
  EXPECT_EQ(Losses(Path("half")), std::vector<double>(straight.begin(), straight.begin() + 2));
  EXPECT_EQ(Losses(Path("resumed"), 3), std::vector<double>(straight.begin() + 2, straight.end()));
  ExpectSameWeights(Path("resumed/final.safetensors"), Path("straight/final.safetensors"), 0);
  // A kept-shard checkpoint resumed by the casting plan, and back.
  ASSERT_EQ(Run(kept, 2, "kept_half", "--ckpt-dir " + Path("kept_ckpt")).status, 0);
  ASSERT_EQ(Run(cast, 5, "into_cast", "--resume-from " + Path("kept_ckpt/step-00000002")).status, 0);
  ExpectSameWeights(Path("into_cast/final.safetensors"), Path("straight/final.safetensors"), 0);
  ASSERT_EQ(Run(kept, 5, "into_kept", "--resume-from " + Path("ckpt/step-00000002")).status, 0);
  ExpectSameWeights(Path("into_kept/final.safetensors"), Path("straight/final.safetensors"), 0);
}

// kill -9 of the whole job at random moments, again and again, each time
// restarted with the same command line (as a scheduler's requeue does): the
// run ends with the parameters of an uninterrupted one, bit for bit.
TEST_F(ResumeTest, SurvivesRepeatedKillNine) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan = MakePlan(2, "full_shard", 2);
  constexpr int kSteps = 40;
  ASSERT_EQ(Run(plan, kSteps, "straight").status, 0);
  const std::string command = std::string(LLMPLAN_BINARY) + " run --cpu --plan " + plan + " --data " +
                              Path("tokens.bin") + " --steps " + std::to_string(kSteps) + " --out " + Path("killed") +
                              " --ckpt-dir " + Path("ckpt") + " --ckpt-every 1 --ckpt-keep 1 --resume";
  auto logged_steps = [&] {
    std::ifstream in(Path("killed/metrics.jsonl"));
    return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
  };
  std::mt19937 gen(2026);
  int kills = 0;
  for (int attempt = 0; attempt < 8 && !fs::exists(Path("killed/summary.json")); ++attempt) {
    const int before = logged_steps();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: the kill reaches the launcher and every rank at once
      ::execl("/bin/sh", "sh", "-c", (command + " >> " + Path("log.txt") + " 2>&1").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    if (kills < 4) {
      // Once it has made progress, at a random moment of a step or a save.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (logged_steps() <= before + 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::this_thread::sleep_for(std::chrono::microseconds(gen() % 300000));
      if (::kill(-pid, SIGKILL) == 0) ++kills;
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(fs::exists(Path("killed/summary.json"))) << executor_test::RunCommand("cat " + Path("log.txt")).output;
  EXPECT_EQ(kills, 4);
  ExpectSameWeights(Path("killed/final.safetensors"), Path("straight/final.safetensors"), 0);
  EXPECT_EQ(Losses(Path("killed")), Losses(Path("straight")));
}

// SIGTERM (a scheduler's notice): the ranks agree on the next step boundary,
// save, write the summary and exit; the resumed run ends where an
// uninterrupted one does.
TEST_F(ResumeTest, SigtermSavesAndResumes) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan = MakePlan(2, "full_shard", 2);
  ASSERT_EQ(Run(plan, 200, "straight", "--no-final-weights").status, 0);
  const std::string command = std::string(LLMPLAN_BINARY) + " run --cpu --plan " + plan + " --data " +
                              Path("tokens.bin") + " --steps 200 --out " + Path("stopped") + " --ckpt-dir " +
                              Path("ckpt") + " --no-final-weights";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command + " > " + Path("log.txt") + " 2>&1").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // After a few steps are logged.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         executor_test::RunCommand("wc -l < " + Path("stopped/metrics.jsonl") + " 2>/dev/null").output.find_first_of("3456789") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string log = executor_test::RunCommand("cat " + Path("log.txt")).output;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << log;
  const auto summary = nlohmann::json::parse(std::ifstream(Path("stopped/summary.json")));
  EXPECT_EQ(summary["stopped_by"], "SIGTERM") << log;
  const int64_t stopped_at = summary["steps"].get<int64_t>();
  ASSERT_GT(stopped_at, 0);
  ASSERT_LT(stopped_at, 200) << "the run finished before the signal";
  EXPECT_TRUE(fs::exists(Path("ckpt/step-" + std::string(8 - std::to_string(stopped_at).size(), '0') +
                              std::to_string(stopped_at) + "/manifest.json")))
      << log;
  CommandResult resumed = Run(plan, 200, "stopped", "--ckpt-dir " + Path("ckpt") + " --resume --no-final-weights");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(Losses(Path("stopped")), Losses(Path("straight")));
}

TEST_F(ResumeTest, DamagedCheckpointIsRefusedInOneLine) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  ASSERT_EQ(Run(plan, 2, "run", "--ckpt-dir " + Path("ckpt")).status, 0);
  const std::string shard = Path("ckpt/step-00000002/shard-00000-of-00001.safetensors");
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 100));
    f.put('\x7f');
  }
  CommandResult r = Run(plan, 4, "run", "--ckpt-dir " + Path("ckpt") + " --resume");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("has checksum"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("was not loaded"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;
}

// A damaged shard of rank 1 of 2: every rank's shards are checked before
// any rank trains, and the launcher names the rank that found the damage.
TEST_F(ResumeTest, ADamagedShardOfOneRankStopsEveryRankBeforeAnyStep) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan = MakePlan(2, "full_shard", 2);
  ASSERT_EQ(Run(plan, 2, "run", "--ckpt-dir " + Path("ckpt")).status, 0);
  const std::string shard = Path("ckpt/step-00000002/shard-00001-of-00002.safetensors");
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) - 100));
    f.put('\x7f');
  }
  const std::string metrics = executor_test::ReadAll(Path("run/metrics.jsonl"));
  CommandResult r = Run(plan, 4, "run", "--ckpt-dir " + Path("ckpt") + " --resume");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("llmplan: rank 1 (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shard-00001-of-00002.safetensors has checksum"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 3/"), std::string::npos) << "no rank trained: " << r.output;
  EXPECT_EQ(executor_test::ReadAll(Path("run/metrics.jsonl")), metrics) << "no step was recorded";
  EXPECT_NE(r.output.find("another rank found " + Path("ckpt/step-00000002") + " damaged"), std::string::npos)
      << "rank 0 stopped at the check, not in a step's collective: " << r.output;
  const std::string summary = executor_test::ReadAll(Path("run/summary.json"));
  EXPECT_EQ(summary.find("\"last_checkpoint\": \"" + Path("ckpt/step-00000002")), std::string::npos)
      << "the summary does not offer the damaged checkpoint: " << summary;
}

TEST_F(ResumeTest, AnEarlierRunIsNeverOverwrittenSilently) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  ASSERT_EQ(Run(plan, 1, "run").status, 0);
  const auto before = fs::last_write_time(Path("run/final.safetensors"));
  CommandResult again = Run(plan, 1, "run");
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_NE(again.output.find("holds an earlier run"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("--overwrite"), std::string::npos) << again.output;
  EXPECT_EQ(fs::last_write_time(Path("run/final.safetensors")), before);
  CommandResult empty = RunLlmplan("run --cpu --plan " + plan + " --data " + Path("tokens.bin") + " --steps 1 --out ''");
  EXPECT_EQ(empty.status, 2) << empty.output;
  CommandResult replaced = Run(plan, 1, "run", "--overwrite");
  EXPECT_EQ(replaced.status, 0) << replaced.output;

  // A second run into a directory another run is writing: refused.
  const int fd = ::open(Path("busy/.llmplan.lock").c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) {
    fs::create_directories(Path("busy"));
  }
  const int lock = fd >= 0 ? fd : ::open(Path("busy/.llmplan.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  CommandResult busy = Run(plan, 1, "busy");
  EXPECT_EQ(busy.status, 2) << busy.output;
  EXPECT_NE(busy.output.find("is writing to"), std::string::npos) << busy.output;
  ::close(lock);
}

// Resuming a run that already took its --steps: nothing to do, and the
// finished run's summary, metrics and weights are left exactly as they were;
// --steps below the checkpoint's step is an error (it is the run's total).
TEST_F(ResumeTest, ResumingAFinishedRunLeavesItsFilesAsTheyWere) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  const std::string ckpt = "--ckpt-dir " + Path("ckpt");
  ASSERT_EQ(Run(plan, 3, "run", ckpt).status, 0);
  const std::string summary = executor_test::ReadAll(Path("run/summary.json")), metrics = executor_test::ReadAll(Path("run/metrics.jsonl"));
  const auto weights_time = fs::last_write_time(Path("run/final.safetensors"));
  ASSERT_NE(summary.find("\"steps\": 3"), std::string::npos) << summary;

  CommandResult again = Run(plan, 3, "run", ckpt + " --resume");
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("the run already reached step 3"), std::string::npos) << again.output;
  CommandResult fewer = Run(plan, 2, "run", ckpt + " --resume");
  EXPECT_EQ(fewer.status, 2) << fewer.output;
  EXPECT_NE(fewer.output.find("--steps 2 is below the step of the checkpoint to resume from (3, "), std::string::npos)
      << fewer.output;
  EXPECT_EQ(executor_test::LlmplanErrorLines(fewer.output).size(), 1u) << fewer.output;

  EXPECT_EQ(executor_test::ReadAll(Path("run/summary.json")), summary);
  EXPECT_EQ(executor_test::ReadAll(Path("run/metrics.jsonl")), metrics);
  EXPECT_EQ(fs::last_write_time(Path("run/final.safetensors")), weights_time);
  // One more step is trained as usual.
  CommandResult more = Run(plan, 4, "run", ckpt + " --resume");
  EXPECT_EQ(more.status, 0) << more.output;
  EXPECT_EQ(Losses(Path("run")).size(), 4u);
}

// The manifest is checked like the shards: a changed step (or data position)
// fails its own checksum; a copied or renamed step-N directory, one without a
// manifest, or one missing a listed file is never resumed from, and what was
// skipped is said. With nothing left, --resume does not start over an earlier
// run's metrics.
TEST_F(ResumeTest, AChangedManifestOrACopiedCheckpointIsNeverResumedFromSilently) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  const std::string ckpt = "--ckpt-dir " + Path("ckpt") + " --ckpt-every 1 --ckpt-keep 3 --no-final-weights";
  ASSERT_EQ(Run(plan, 2, "run", ckpt).status, 0);
  const std::string step1 = Path("ckpt/step-00000001"), step2 = Path("ckpt/step-00000002");
  {  // step 2's manifest says step 3: one digit changed
    std::string text = executor_test::ReadAll(step2 + "/manifest.json");
    const std::string was = "\"step\": 2", now = "\"step\": 3";
    const size_t at = text.find(was);
    ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
    text.replace(at, was.size(), now);
    std::ofstream(step2 + "/manifest.json", std::ios::trunc) << text;
  }
  CommandResult direct = Run(plan, 4, "run", ckpt + " --resume-from " + step2);
  EXPECT_EQ(direct.status, 2) << direct.output;
  EXPECT_NE(direct.output.find("does not match its contents"), std::string::npos) << direct.output;
  // A copy of step 1 under a later name.
  fs::copy(step1, Path("ckpt/step-00000099"), fs::copy_options::recursive);
  fs::create_directories(Path("ckpt/step-00000050"));  // no manifest

  CommandResult resumed = Run(plan, 3, "run", ckpt + " --resume");
  EXPECT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + step1), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find(step2 + " skipped: "), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000099 is named for step 99 but its manifest holds step 1"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000050 skipped: it has no manifest.json"), std::string::npos) << resumed.output;
  EXPECT_EQ(Losses(Path("run")).size(), 3u) << "steps 1..3 read as one run";
  EXPECT_TRUE(fs::exists(step1)) << "pruning kept the real checkpoints, not the copy";

  // A file the manifest lists is missing: refused, not resumed without it.
  fs::remove(Path("ckpt/step-00000003/plan.json"));
  CommandResult missing = Run(plan, 4, "run", ckpt + " --resume-from " + Path("ckpt/step-00000003"));
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("plan.json is missing"), std::string::npos) << missing.output;

  // Nothing usable left: --resume refuses to start over the earlier metrics.
  fs::remove_all(Path("ckpt"));
  fs::create_directories(Path("ckpt/step-00000007"));
  CommandResult over = Run(plan, 4, "run", ckpt + " --resume");
  EXPECT_EQ(over.status, 2) << over.output;
  EXPECT_NE(over.output.find("holds no checkpoint to resume from"), std::string::npos) << over.output;
  EXPECT_EQ(Losses(Path("run")).size(), 3u) << "the earlier metrics are kept";
}

// Two runs saving into one --ckpt-dir would interleave their checkpoints and
// a later --resume could continue the other run: the directory is locked as
// --out is.
TEST_F(ResumeTest, TwoRunsNeverShareACheckpointDirectory) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  fs::create_directories(Path("ckpt"));
  const int lock = ::open(Path("ckpt/.llmplan.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);  // as a run writing there holds it
  CommandResult second = Run(plan, 1, "second", "--ckpt-dir " + Path("ckpt"));
  EXPECT_EQ(second.status, 2) << second.output;
  EXPECT_NE(second.output.find("is writing to " + Path("ckpt") + ": wait for it or choose another --ckpt-dir"),
            std::string::npos)
      << second.output;
  EXPECT_FALSE(fs::exists(Path("ckpt/step-00000001")));
  ::close(lock);
  EXPECT_EQ(Run(plan, 1, "second", "--ckpt-dir " + Path("ckpt") + " --overwrite").status, 0);
  EXPECT_TRUE(fs::exists(Path("ckpt/step-00000001")));
}

// The checkpoint records which token file it was trained on (by content):
// resuming on another is refused unless --data-changed; the same file under
// another path is the same data.
TEST_F(ResumeTest, ResumingOnAnotherTokenFileNeedsDataChanged) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  const std::string ckpt = "--ckpt-dir " + Path("ckpt") + " --no-final-weights";
  ASSERT_EQ(Run(plan, 2, "run", ckpt).status, 0);
  const nlohmann::json manifest =
      nlohmann::json::parse(executor_test::ReadAll(Path("ckpt/step-00000002/manifest.json")));
  EXPECT_EQ(manifest["data"]["name"], "tokens.bin") << manifest["data"].dump();
  EXPECT_EQ(manifest["data"]["bytes"].get<uint64_t>(), fs::file_size(Path("tokens.bin")));

  fs::copy_file(Path("tokens.bin"), Path("moved.bin"));
  std::string other = executor_test::ReadAll(Path("tokens.bin"));
  other[10] = static_cast<char>(other[10] ^ 1);  // one token changed
  std::ofstream(Path("other.bin"), std::ios::binary) << other;

  auto resume = [&](const std::string& data, int steps, const std::string& extra = "") {
    return RunLlmplan("run --cpu --plan " + plan + " --data " + Path(data) + " --steps " + std::to_string(steps) +
                      " --out " + Path("run") + " " + ckpt + " --resume " + extra);
  };
  CommandResult refused = resume("other.bin", 3);
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(executor_test::LlmplanErrorLines(refused.output).size(), 1u) << refused.output;
  EXPECT_NE(refused.output.find("is not the token file"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--data-changed"), std::string::npos) << refused.output;
  EXPECT_EQ(Losses(Path("run")).size(), 2u) << "nothing was trained";

  CommandResult moved = resume("moved.bin", 3);
  EXPECT_EQ(moved.status, 0) << moved.output;
  CommandResult changed = resume("other.bin", 4, "--data-changed");
  EXPECT_EQ(changed.status, 0) << changed.output;
  EXPECT_NE(changed.output.find("--data-changed: continuing on other.bin, not moved.bin"), std::string::npos)
      << changed.output;
  EXPECT_EQ(Losses(Path("run")).size(), 4u);
}

// A checkpoint belongs to the plan that saved it: another seed or sequence
// length would make its data position name other samples. Resuming it with
// such a plan needs --plan-changed; another strategy or batch does not.
TEST_F(ResumeTest, ResumingAnotherPlansCheckpointNeedsPlanChanged) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  const std::string ckpt = "--ckpt-dir " + Path("ckpt") + " --no-final-weights";
  ASSERT_EQ(Run(plan, 2, "run", ckpt).status, 0);
  // Another micro-batch split of the same batch is the same run.
  CommandResult split = Run(MakePlan(1, "no_shard", 2), 3, "run", ckpt + " --resume");
  EXPECT_EQ(split.status, 0) << split.output;

  nlohmann::json other = nlohmann::json::parse(std::ifstream(plan));
  other["seed"] = other["seed"].get<int64_t>() + 1;
  std::ofstream(Path("other-seed.json")) << other.dump(1);
  CommandResult refused = Run(Path("other-seed.json"), 4, "run", ckpt + " --resume");
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(executor_test::LlmplanErrorLines(refused.output).size(), 1u) << refused.output;
  EXPECT_NE(refused.output.find("was saved by another plan (model tiny-llama, seed "), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--plan-changed"), std::string::npos) << refused.output;
  EXPECT_EQ(Losses(Path("run")).size(), 3u) << "nothing was trained";

  CommandResult changed = Run(Path("other-seed.json"), 4, "run", ckpt + " --resume --plan-changed");
  EXPECT_EQ(changed.status, 0) << changed.output;
  EXPECT_NE(changed.output.find("--plan-changed: continuing"), std::string::npos) << changed.output;
  EXPECT_EQ(Losses(Path("run")).size(), 4u);
}

// export into a directory that already holds a model replaces it only when
// asked to.
TEST_F(ResumeTest, ExportIntoADirectoryHoldingAModelNeedsOverwrite) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  ASSERT_EQ(Run(plan, 1, "run", "--ckpt-dir " + Path("ckpt") + " --no-final-weights").status, 0);
  const std::string exported = "export --ckpt " + Path("ckpt/step-00000001") + " --out " + Path("hf");
  ASSERT_EQ(RunLlmplan(exported).status, 0);
  const auto written = fs::last_write_time(Path("hf/model.safetensors"));
  CommandResult again = RunLlmplan(exported);
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_NE(again.output.find("already holds a model"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("--overwrite"), std::string::npos) << again.output;
  EXPECT_EQ(fs::last_write_time(Path("hf/model.safetensors")), written);
  EXPECT_EQ(RunLlmplan(exported + " --overwrite").status, 0);
}

// Weights with tensors the model does not use (a larger model's layers) are
// refused: silently dropping them trains another model than the user meant.
// --init-partial loads what matches and lists what it left out.
TEST_F(ResumeTest, InitFromWeightsWithTensorsTheModelDoesNotUseIsAnError) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  ASSERT_EQ(Run(plan, 1, "run").status, 0);
  auto tensors = checkpoint::ReadSafetensors(Path("run/final.safetensors")).tensors;
  ASSERT_TRUE(tensors.count("model.layers.0.mlp.up_proj.weight"));
  tensors["model.layers.99.mlp.up_proj.weight"] = tensors.at("model.layers.0.mlp.up_proj.weight").clone();
  checkpoint::WriteSafetensors(Path("larger.safetensors"), tensors);

  CommandResult refused = Run(plan, 1, "refused", "--init-from " + Path("larger.safetensors"));
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_EQ(executor_test::LlmplanErrorLines(refused.output).size(), 1u) << refused.output;
  EXPECT_NE(refused.output.find("holds 1 tensor(s) this model does not use (model.layers.99.mlp.up_proj.weight)"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--init-partial"), std::string::npos) << refused.output;

  CommandResult partial = Run(plan, 1, "partial", "--init-from " + Path("larger.safetensors") + " --init-partial");
  EXPECT_EQ(partial.status, 0) << partial.output;
  EXPECT_NE(partial.output.find("left out 1 tensor(s) of " + Path("larger.safetensors") +
                                " the model does not use: model.layers.99.mlp.up_proj.weight"),
            std::string::npos)
      << partial.output;
  // The file's own tensors, exactly: a tied head or rotary tables are not "unused".
  tensors.erase("model.layers.99.mlp.up_proj.weight");
  tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::ones({4});
  checkpoint::WriteSafetensors(Path("with_rotary.safetensors"), tensors);
  EXPECT_EQ(Run(plan, 1, "rotary", "--init-from " + Path("with_rotary.safetensors")).status, 0);
}

// A checkpoint directory that cannot be written: a warning per save, the
// training itself unharmed.
TEST_F(ResumeTest, UnwritableCheckpointDirectoryDoesNotStopTraining) {
  const std::string plan = MakePlan(1, "no_shard", 4);
  std::ofstream(Path("a-file")) << "x";
  CommandResult r = Run(plan, 2, "run", "--ckpt-dir " + Path("a-file/ckpt") + " --ckpt-every 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("warning: checkpoint at step 1 not saved"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(Path("run/final.safetensors")));
}

// export writes what --init-from reads (and transformers): fp32 export of the
// last checkpoint equals the run's final weights; a run started from it
// starts from them.
TEST_F(ResumeTest, ExportAndInitFromRoundTrip) {
  LLMPLAN_SKIP_WITHOUT_GLOO();
  const std::string plan = MakePlan(2, "full_shard", 2);
  ASSERT_EQ(Run(plan, 2, "run", "--ckpt-dir " + Path("ckpt")).status, 0);
  CommandResult exported = RunLlmplan("export --ckpt " + Path("ckpt/step-00000002") + " --out " + Path("hf") + " --dtype fp32");
  ASSERT_EQ(exported.status, 0) << exported.output;
  ExpectSameWeights(Path("hf/model.safetensors"), Path("run/final.safetensors"), 0);
  const ModelSpec spec = LoadModelSpec(Path("hf"));
  const ModelSpec tiny = PresetModel("tiny-llama");
  EXPECT_EQ(spec.hidden, tiny.hidden);
  EXPECT_EQ(spec.layers, tiny.layers);
  EXPECT_EQ(spec.vocab, tiny.vocab);
  EXPECT_EQ(spec.kv_heads, tiny.kv_heads);

  // Started from the exported weights, the first loss is the trained model's
  // (lower than a fresh model's first loss).
  CommandResult fresh = Run(plan, 1, "fresh");
  CommandResult warm = Run(plan, 1, "warm", "--init-from " + Path("hf"));
  ASSERT_EQ(warm.status, 0) << warm.output;
  EXPECT_LT(Losses(Path("warm"))[0], Losses(Path("fresh"))[0]);
  CommandResult other = Run(plan, 1, "other", "--init-from " + Path("tokens.bin"));
  EXPECT_EQ(other.status, 2) << other.output;
}

}  // namespace
}  // namespace llmplan
