// The built llmplan CLI, run as a user runs it: the README's estimate command,
// the --json contract, estimate -o | simulate agreement, the Perfetto trace,
// and every bad-input path (exit status 2, exactly one line on stderr).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::CliResult;
using testing::ExpectBadInput;
using testing::ProfilePath;
using testing::RunCli;
using testing::ScratchDir;

const char* kReadme = "estimate --model llama3-8b --gpus 8 --gpu h100-sxm-80g --seq 8192 --global-batch 256";

TEST(CliTest, ReadmeEstimateCommand) {
  ScratchDir dir;
  CliResult r = RunCli(kReadme, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("Plan"), std::string::npos);
  EXPECT_NE(r.out.find("MFU"), std::string::npos);
  EXPECT_NE(r.out.find("8,030,261,248"), std::string::npos) << "exact parameter count in the header";
}

TEST(CliTest, JsonContractAndSimulateAgrees) {
  ScratchDir dir;
  const std::string plan = dir.File("plan.json");
  CliResult r = RunCli(std::string(kReadme) + " --json -o '" + plan + "'", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);  // throws (fails the test) if not JSON

  EXPECT_EQ(j["model"]["params"].get<int64_t>(), 8'030'261'248);
  EXPECT_TRUE(j["plan"]["strategy"].is_string());
  EXPECT_TRUE(j["plan"]["micro_batch"].is_number_integer());
  EXPECT_TRUE(j["plan"]["grad_accum"].is_number_integer());
  EXPECT_EQ(j["plan"]["micro_batch"].get<int64_t>() * j["plan"]["grad_accum"].get<int64_t>() * 8, 256);
  EXPECT_TRUE(j["plan"]["checkpoint_layers"].is_array());
  EXPECT_TRUE(j["plan"]["offload"].is_string());
  for (const char* k : {"peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes"})
    EXPECT_TRUE(j["memory"][k].is_number()) << k;
  EXPECT_TRUE(j["memory"]["breakdown"].is_object());
  EXPECT_FALSE(j["memory"]["breakdown"].empty());
  EXPECT_TRUE(j["time"]["step_s"].is_number());
  EXPECT_GT(j["time"]["step_s"].get<double>(), 0);
  EXPECT_TRUE(j["time"]["breakdown"].is_object());
  EXPECT_TRUE(j["throughput"]["tokens_per_s_per_gpu"].is_number());
  EXPECT_TRUE(j["throughput"]["mfu"].is_number());
  EXPECT_GT(j["throughput"]["mfu"].get<double>(), 0);
  EXPECT_LT(j["throughput"]["mfu"].get<double>(), 1);
  ASSERT_TRUE(j["fits"].is_boolean());
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_TRUE(j["alternatives"].is_array());
  // tokens/s/GPU = micro_batch * grad_accum * seq / step_s
  double tps = static_cast<double>(j["plan"]["micro_batch"].get<int64_t>() * j["plan"]["grad_accum"].get<int64_t>()) *
               8192 / j["time"]["step_s"].get<double>();
  EXPECT_NEAR(j["throughput"]["tokens_per_s_per_gpu"].get<double>(), tps, 1e-9 * tps);
  // The memory breakdown sums to the device total.
  double sum = 0;
  for (const auto& [k, v] : j["memory"]["breakdown"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, j["memory"]["device_peak_bytes"].get<double>(), 1e-6 * sum);

  // simulate the written plan: same step time and memory peak.
  CliResult s = RunCli("simulate --plan '" + plan + "' --json", dir);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  nlohmann::json sj = nlohmann::json::parse(s.out);
  EXPECT_EQ(sj["time"]["step_s"].get<double>(), j["time"]["step_s"].get<double>());
  EXPECT_EQ(sj["memory"]["peak_allocated_bytes"].get<double>(), j["memory"]["peak_allocated_bytes"].get<double>());
  EXPECT_EQ(sj["memory"]["peak_reserved_bytes"].get<double>(), j["memory"]["peak_reserved_bytes"].get<double>());
  EXPECT_EQ(sj["memory"]["device_peak_bytes"].get<double>(), j["memory"]["device_peak_bytes"].get<double>());
  EXPECT_EQ(sj["plan"]["checkpoint_layers"], j["plan"]["checkpoint_layers"]);
  EXPECT_EQ(sj["plan"]["strategy"], j["plan"]["strategy"]);
}

TEST(CliTest, SimulateTraceIsPerfettoJson) {
  ScratchDir dir;
  const std::string plan = dir.File("plan.json"), trace = dir.File("t.json");
  // Full shard over 4 GPUs: gathers and reduce-scatters run beside compute.
  CliResult e = RunCli("estimate --model llama3-8b --gpus 4 --gpu h200-sxm --seq 4096 --global-batch 8 "
                       "--strategy full_shard --micro-batch 1 --offload none -o '" + plan + "'",
                       dir);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const std::string svg = dir.File("step.svg");
  CliResult s = RunCli("simulate --plan '" + plan + "' --trace '" + trace + "' --svg '" + svg + "'", dir);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("trace written"), std::string::npos);
  const std::string picture = testing::ReadFile(svg);
  EXPECT_EQ(picture.rfind("<svg", 0), 0u);
  EXPECT_NE(picture.find("</svg>"), std::string::npos);
  nlohmann::json t = nlohmann::json::parse(testing::ReadFile(trace));
  ASSERT_TRUE(t["traceEvents"].is_array());
  std::map<int, std::string> tracks;
  std::vector<nlohmann::json> compute, collective;
  int counters = 0;
  for (const auto& ev : t["traceEvents"]) {
    std::string ph = ev["ph"];
    if (ph == "M" && ev["name"] == "thread_name") tracks[ev["tid"].get<int>()] = ev["args"]["name"];
    if (ph == "X") {
      EXPECT_GE(ev["dur"].get<double>(), 0);
      std::string cat = ev["cat"];
      if (cat == "forward" || cat == "backward") compute.push_back(ev);
      if (cat == "all_gather" || cat == "reduce_scatter") collective.push_back(ev);
    }
    if (ph == "C") {
      ++counters;
      EXPECT_TRUE(ev["args"].is_object());
    }
  }
  // One track per stream, named.
  EXPECT_EQ(tracks.size(), 6u);
  for (const char* name : {"compute", "all-gather", "reduce", "host-to-device", "device-to-host", "cpu"})
    EXPECT_NE(std::find_if(tracks.begin(), tracks.end(), [&](auto& kv) { return kv.second == name; }), tracks.end())
        << name;
  ASSERT_FALSE(compute.empty());
  ASSERT_FALSE(collective.empty());
  // Some collective span overlaps some compute span in time, on another track.
  bool overlap = false;
  for (const auto& c : collective) {
    double a0 = c["ts"], a1 = a0 + c["dur"].get<double>();
    for (const auto& f : compute) {
      double b0 = f["ts"], b1 = b0 + f["dur"].get<double>();
      if (a0 < b1 && b0 < a1 && c["tid"] != f["tid"]) overlap = true;
    }
    if (overlap) break;
  }
  EXPECT_TRUE(overlap) << "prefetched gathers / reduce-scatters should run beside compute";
  EXPECT_GT(counters, 2) << "memory counter samples";
}

TEST(CliTest, BadCommandLinesExitTwoWithOneLine) {
  ScratchDir dir;
  const std::string m = "estimate --model llama3-8b ";
  for (const std::string& args : {
           std::string("estimate --model no-such-model"),
           m + "--gpu no-such-profile",
           m + "--gpu /no/such/dir/profile.json",
           m + "--gpu '" + dir.path().string() + "/'",  // a directory
           m + "--seq 0",
           m + "--seq -5",
           m + "--seq 99999999999",
           m + "--gpus 0",
           m + "--gpus -3",
           m + "--gpus abc",
           m + "--gpus 99999999",
           m + "--micro-batch -1",
           m + "--micro-batch 70000",
           m + "--grad-accum -2",
           m + "--gpus 8 --global-batch 12",
           m + "--gpus 8 --global-batch -8",
           m + "--gpus 2 --global-batch 9223372036854775807",
           m + "--gpus 8 --global-batch 256 --micro-batch 3",
           m + "--checkpoint-layers 5-2",
           m + "--checkpoint-layers 99",
           m + "--checkpoint-layers x",
           m + "--checkpoint-layers 1,,2",
           m + "--strategy foo",
           m + "--offload foo",
           m + "--gpus 8 --shard-group 3",
           m + "--prefetch 100",
           m + "--host-memory -5",
           m + "--host-memory lots",
           std::string("estimate --model llama3-8b --gpus 1 --gpu h200-sxm --strategy no_shard --offload optimizer "
                       "--micro-batch 1 --host-memory 64"),  // the host, not the GPU, is short
           m + "--gpus 1 --offload params --delayed-update",
           m + "--gpus 1 --grad-accum 2 --delayed-update",
           m + "--gpus 1 --offload optimizer --offload-staging ring",
           m + "--gpus 1 --offload params --offload-staging unit",
           m + "--gpus 1 --offload optimizer --offload-staging unit --delayed-update",
           m + "--loss-chunk 0",
           m + "--lr 1e308",
           m + "--no-such-flag",
           std::string("estimate"),                          // --model missing
           std::string("no-such-command"),
           std::string("estimate --model llama3.1-405b --gpus 1 --gpu l40s-pcie --offload none"),  // fits nowhere
       })
    ExpectBadInput(args, dir);
}

TEST(CliTest, DelayedUpdateIsOptInAndOnlyWhereItCanRun) {
  // Without the flag no plan delays its update; with it, the optimizer
  // offload at one micro-batch per step does, and the report says so.
  ScratchDir dir;
  const std::string base = "estimate --model tiny-llama --gpu cpu --gpus 1 --seq 64 --global-batch 4 --offload optimizer ";
  CliResult off = RunCli(base + "--micro-batch 4 -o " + dir.File("off.json"), dir);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_FALSE(nlohmann::json::parse(std::ifstream(dir.File("off.json")))["delayed_update"].get<bool>());
  CliResult on = RunCli(base + "--micro-batch 4 --delayed-update -o " + dir.File("on.json"), dir);
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(dir.File("on.json")))["delayed_update"].get<bool>());
  EXPECT_NE(on.out.find("delayed update (each step's gradients applied during the next)"), std::string::npos)
      << on.out;
  // Accumulating plans cannot take it: the flag leaves them undelayed.
  CliResult accum = RunCli(base + "--micro-batch 2 --delayed-update -o " + dir.File("accum.json"), dir);
  ASSERT_EQ(accum.exit_code, 0) << accum.err;
  EXPECT_FALSE(nlohmann::json::parse(std::ifstream(dir.File("accum.json")))["delayed_update"].get<bool>());
}

// planner/gradient_path.h: the report says when AdamW reads the bf16
// gradient (one GPU, one micro-batch, on a GPU) and the memory then shows no
// fp32 gradient; a second micro-batch, or a CPU, keeps the fp32 one.
TEST(CliTest, EstimateSaysWhenAdamWReadsTheBf16Gradient) {
  ScratchDir dir;
  const std::string base = "estimate --model llama3.2-1b --gpus 1 --seq 2048 --global-batch 4 --strategy no_shard ";
  CliResult one = RunCli(base + "--gpu h200-sxm --micro-batch 4", dir);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(one.out.find("gradients              bf16 as autograd wrote them, read by AdamW"), std::string::npos)
      << one.out;
  EXPECT_EQ(one.out.find("grad_shards"), std::string::npos) << one.out;
  CliResult two = RunCli(base + "--gpu h200-sxm --micro-batch 2", dir);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(two.out.find("read by AdamW"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("grad_shards"), std::string::npos) << two.out;
  CliResult cpu = RunCli("estimate --model tiny-llama --gpu cpu --gpus 1 --seq 64 --global-batch 4 --micro-batch 4", dir);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cpu.out.find("read by AdamW"), std::string::npos) << cpu.out;
}

TEST(CliTest, CastAtGatherIsSaidAndRefusedWhereNothingGathers) {
  ScratchDir dir;
  const std::string base = "estimate --model llama3-8b --gpu h200-sxm --seq 4096 --global-batch 16 --micro-batch 2 "
                           "--checkpoint-layers all ";
  CliResult on = RunCli(base + "--gpus 2 --strategy full_shard --cast-at-gather yes", dir);
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_NE(on.out.find("each gather casts the fp32 shard"), std::string::npos) << on.out;
  EXPECT_EQ(on.out.find("compute_params"), std::string::npos) << on.out;
  CliResult off = RunCli(base + "--gpus 2 --strategy full_shard --cast-at-gather no", dir);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("compute_params"), std::string::npos) << off.out;
  for (const char* bad : {"--gpus 1 --cast-at-gather yes", "--gpus 2 --cast-at-gather maybe",
                          "--gpus 2 --offload optimizer --cast-at-gather yes"}) {
    CliResult r = RunCli(base + bad, dir);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("--cast-at-gather"), std::string::npos) << r.err;
  }
}

TEST(CliTest, OffloadStagingIsPerUnitWhereTheHostHasRoom) {
  // tiny-llama (250,432 parameters, the largest unit a block of 46,208) with
  // its optimizer offloaded pins master 4 + AdamW 8 bytes a parameter, and
  // for the staging either 4 + 2 bytes a parameter (per unit: 4.30 MiB in
  // all) or 12 bytes per element of the largest unit (slots: 3.39 MiB).
  ScratchDir dir;
  const std::string base = "estimate --model tiny-llama --gpu cpu --gpus 1 --seq 64 --global-batch 4 --micro-batch 4 "
                           "--offload optimizer ";
  auto staging = [&](const std::string& name) {
    return nlohmann::json::parse(std::ifstream(dir.File(name)))["offload_staging"].get<std::string>();
  };
  CliResult roomy = RunCli(base + "-o " + dir.File("roomy.json"), dir);
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  EXPECT_EQ(staging("roomy.json"), "unit");
  EXPECT_NE(roomy.out.find("gradients staged on the host per unit"), std::string::npos) << roomy.out;
  // 4 MiB of host: the slots fit, a buffer per unit does not.
  CliResult short_host = RunCli(base + "--host-memory 0.00390625 -o " + dir.File("short.json"), dir);
  ASSERT_EQ(short_host.exit_code, 0) << short_host.err;
  EXPECT_EQ(staging("short.json"), "slots");
  EXPECT_NE(short_host.out.find("gradients through the host staging slots"), std::string::npos) << short_host.out;
  // Pinned: slots though the host has room; per unit though it has not.
  CliResult pinned = RunCli(base + "--offload-staging slots -o " + dir.File("pinned.json"), dir);
  ASSERT_EQ(pinned.exit_code, 0) << pinned.err;
  EXPECT_EQ(staging("pinned.json"), "slots");
  ExpectBadInput(base + "--host-memory 0.00390625 --offload-staging unit", dir);
  // The delayed update keeps the slots.
  CliResult delayed = RunCli(base + "--delayed-update -o " + dir.File("delayed.json"), dir);
  ASSERT_EQ(delayed.exit_code, 0) << delayed.err;
  EXPECT_EQ(staging("delayed.json"), "slots");
  // No offloaded optimizer, nothing staged: not in the plan file.
  CliResult none = RunCli("estimate --model tiny-llama --gpu cpu --gpus 1 --seq 64 --global-batch 4 --offload none -o " +
                              dir.File("none.json"),
                          dir);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_FALSE(nlohmann::json::parse(std::ifstream(dir.File("none.json"))).contains("offload_staging"));
}

TEST(CliTest, ZeroMicroBatchOrGradAccumIsRejected) {
  // 0 is not "unset": a user who types --micro-batch 0 made a mistake.
  ScratchDir dir;
  ExpectBadInput("estimate --model tiny-llama --gpu cpu --gpus 2 --micro-batch 0", dir);
  ExpectBadInput("estimate --model tiny-llama --gpu cpu --gpus 2 --grad-accum 0", dir);
}

TEST(CliTest, HostileModelConfigsExitTwoWithOneLine) {
  ScratchDir dir;
  nlohmann::json good = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},  {"intermediate_size", 128},
                         {"num_attention_heads", 4},              {"num_hidden_layers", 2}, {"vocab_size", 100}};
  ASSERT_EQ(RunCli("estimate --model '" + dir.Write("good.json", good.dump()) + "' --gpu cpu --gpus 1", dir).exit_code,
            0);
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    if (v.is_null()) j.erase(key);
    else j[key] = v;
    return j.dump();
  };
  std::vector<std::pair<std::string, std::string>> files = {
      {"deep.json", std::string(100000, '[') + std::string(100000, ']')},
      {"deep_obj.json", [] {
         std::string s;
         for (int i = 0; i < 5000; ++i) s += "{\"a\":";
         s += "1";
         for (int i = 0; i < 5000; ++i) s += "}";
         return s;
       }()},
      {"malformed.json", "{\"hidden_size\": 64,"},
      {"empty.json", ""},
      {"binary.json", std::string("\x00\xff\xfe{", 4)},
      {"array.json", "[1, 2, 3]"},
      {"huge.json", with("hidden_size", 1e308)},
      {"overflow.json", R"({"architectures":["LlamaForCausalLM"],"hidden_size":1e400})"},
      {"string.json", with("hidden_size", "64")},
      {"fraction.json", with("num_hidden_layers", 2.5)},
      {"negative.json", with("vocab_size", -100)},
      {"zero.json", with("intermediate_size", 0)},
      {"missing.json", with("num_attention_heads", nullptr)},
      {"gpt2.json", with("architectures", {"GPT2LMHeadModel"})},
      {"arch_number.json", with("architectures", {42})},
      {"kv.json", with("num_key_value_heads", 3)},
      {"kv_zero.json", with("num_key_value_heads", 0)},
      {"head_dim_odd.json", with("head_dim", 15)},
      {"layers.json", with("num_hidden_layers", 100000)},
      {"tie_string.json", with("tie_word_embeddings", "true")},
      {"mlp_bias.json", with("mlp_bias", true)},
      {"rope.json", with("rope_theta", -1)},
      // Each field below 2^24 but hidden x heads x head_dim = 2^72: past int64.
      {"overflow_product.json", [&] {
         nlohmann::json j = good;
         for (const char* k : {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                               "head_dim", "vocab_size"})
           j[k] = 16777216;
         j["num_hidden_layers"] = 4096;
         return j.dump();
       }()},
  };
  for (const auto& [name, text] : files) ExpectBadInput("estimate --gpu cpu --gpus 1 --model '" + dir.Write(name, text) + "'", dir);
  // A directory without config.json, and a path that does not exist.
  std::filesystem::create_directories(dir.path() / "empty_dir");
  ExpectBadInput("estimate --model '" + dir.File("empty_dir") + "'", dir);
  ExpectBadInput("estimate --model '" + dir.File("nope/config.json") + "'", dir);
}

TEST(CliTest, HostileProfilesExitTwoWithOneLine) {
  ScratchDir dir;
  nlohmann::json good = nlohmann::json::parse(testing::ReadFile(ProfilePath("h100-sxm-80g")));
  auto edit = [&](auto f) {
    nlohmann::json j = good;
    f(j);
    return j.dump();
  };
  std::vector<std::pair<std::string, std::string>> files = {
      {"neg.json", edit([](auto& j) { j["memory"]["capacity_bytes"] = -1; })},
      {"str.json", edit([](auto& j) { j["compute"]["bf16_peak_flops"] = "fast"; })},
      {"huge.json", edit([](auto& j) { j["compute"]["bf16_peak_flops"] = 1e308; })},
      {"nocompute.json", edit([](auto& j) { j.erase("compute"); })},
      {"emptycurve.json", edit([](auto& j) { j["collectives"]["intra_node"]["all_gather"] = nlohmann::json::array(); })},
      {"badpoint.json", edit([](auto& j) { j["collectives"]["intra_node"]["all_gather"][0] = {1, -1}; })},
      {"context.json", edit([](auto& j) { j["memory"]["cuda_context_bytes"] = 1e14; })},
      {"kind.json", edit([](auto& j) { j["device_kind"] = "tpu"; })},
      {"gpn.json", edit([](auto& j) { j["topology"]["gpus_per_node"] = 0; })},
      {"malformed.json", "{\"name\": "},
  };
  for (const auto& [name, text] : files)
    ExpectBadInput("estimate --model tiny-llama --gpus 2 --gpu '" + dir.Write(name, text) + "'", dir);
  ASSERT_EQ(RunCli("estimate --model tiny-llama --gpus 2 --gpu '" + dir.Write("ok.json", good.dump()) + "'", dir).exit_code, 0);
}

TEST(CliTest, MalformedPlanFilesForSimulate) {
  ScratchDir dir;
  const std::string plan = dir.File("plan.json");
  ASSERT_EQ(RunCli("estimate --model tiny-llama --gpus 4 --gpu cpu --seq 128 --global-batch 8 -o '" + plan + "'", dir)
                .exit_code,
            0);
  nlohmann::json good = nlohmann::json::parse(testing::ReadFile(plan));
  ASSERT_EQ(RunCli("simulate --plan '" + plan + "'", dir).exit_code, 0);
  auto edit = [&](auto f) {
    nlohmann::json j = good;
    f(j);
    return j.dump();
  };
  std::vector<std::pair<std::string, std::string>> files = {
      {"empty.json", ""},
      {"text.json", "this is not json"},
      {"deep.json", std::string(10000, '[') + std::string(10000, ']')},
      {"array.json", "[]"},
      {"nomodel.json", edit([](auto& j) { j.erase("model"); })},
      {"gpus_str.json", edit([](auto& j) { j["gpus"] = "x"; })},
      {"gpus_neg.json", edit([](auto& j) { j["gpus"] = -4; })},
      {"gpus_huge.json", edit([](auto& j) { j["gpus"] = 1e308; })},
      {"mb0.json", edit([](auto& j) { j["micro_batch"] = 0; })},
      {"seq.json", edit([](auto& j) { j["seq_len"] = 1e300; })},
      {"ckpt99.json", edit([](auto& j) { j["checkpoint_layers"] = {99}; })},
      {"ckpt_neg.json", edit([](auto& j) { j["checkpoint_layers"] = {-1}; })},
      {"ckpt_frac.json", edit([](auto& j) { j["checkpoint_layers"] = {1.5}; })},
      {"ckpt_obj.json", edit([](auto& j) { j["checkpoint_layers"] = {{"a", 1}}; })},
      {"strategy.json", edit([](auto& j) { j["strategy"] = "foo"; })},
      {"offload.json", edit([](auto& j) { j["offload"] = 7; })},
      {"group.json", edit([](auto& j) { j["shard_group_size"] = 3; })},
      {"hybrid.json", edit([](auto& j) { j["strategy"] = "hybrid_shard"; j["shard_group_size"] = 4; })},
      {"profile.json", edit([](auto& j) { j["profile"] = "no-such-gpu"; })},
      {"arch.json", edit([](auto& j) { j["model"]["architectures"] = {"GPT2LMHeadModel"}; })},
      {"kv.json", edit([](auto& j) { j["model"]["num_key_value_heads"] = 3; })},
      {"hidden.json", edit([](auto& j) { j["model"]["hidden_size"] = -64; })},
      {"lr.json", edit([](auto& j) { j["optimizer"]["lr"] = "high"; })},
      {"no_optimizer.json", edit([](auto& j) { j.erase("optimizer"); })},
      {"global_batch_negative.json", edit([](auto& j) { j["global_batch"] = -8; })},
      {"global_batch_other.json", edit([](auto& j) { j["global_batch"] = j["global_batch"].template get<int64_t>() + 1; })},
      {"dtype.json", edit([](auto& j) { j["param_dtype"] = "fp8"; })},
      {"prefetch.json", edit([](auto& j) { j["prefetch_depth"] = 100; })},
      // Every factor in range, tokens per step 2^20 * 2^16 * 2^16 * 2^22 = 2^74: not "0 tokens".
      {"absurd_tokens.json", edit([](auto& j) {
         j["gpus"] = 1048576;
         j["shard_group_size"] = 1048576;
         j["micro_batch"] = 65536;
         j["grad_accum"] = 65536;
         j["seq_len"] = 4194304;
       })},
  };
  for (const auto& [name, text] : files) ExpectBadInput("simulate --plan '" + dir.Write(name, text) + "'", dir);
  ExpectBadInput("simulate --plan '" + dir.File("missing.json") + "'", dir);
  ExpectBadInput("simulate --plan '" + dir.path().string() + "'", dir);  // a directory
  ExpectBadInput("simulate", dir);                                         // --plan missing
  ExpectBadInput("simulate --plan '" + plan + "' --gpu no-such-gpu", dir);
  ExpectBadInput("simulate --plan '" + plan + "' --trace /no/such/dir/t.json", dir);
  ExpectBadInput("simulate --plan '" + plan + "' --svg /no/such/dir/step.svg", dir);
}

}  // namespace
}  // namespace llmplan
