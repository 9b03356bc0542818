// The doctor's verdicts on numbers passed in: environment variables against
// the machine's measured links, GPU surveys of machines we do not have
// (NVLink, PCIe, broken), the report's text, JSON and exit status.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "executor/doctor/environment_checks.h"
#include "executor/doctor/finding.h"
#include "executor/doctor/gpu_checks.h"
#include "executor/doctor/gpu_islands.h"
#include "executor/doctor/nccl_tuning.h"
#include "executor/hardware/cuda_machine.h"
#include "planner/program_builder.h"

namespace llmplan::executor {
namespace {

const Finding* Find(const std::vector<Finding>& findings, const std::string& check) {
  for (const Finding& f : findings)
    if (f.check == check) return &f;
  return nullptr;
}

Verdict VerdictOf(const std::map<std::string, std::string>& vars, const EnvironmentFacts& facts, const std::string& name) {
  const std::vector<Finding> findings = JudgeEnvironment(vars, facts);
  const Finding* f = Find(findings, name);
  EXPECT_NE(f, nullptr) << name << " not judged";
  return f ? f->verdict : Verdict::kSkipped;
}

const EnvironmentFacts kTwoNvlinkGpus{2, /*nvlink=*/true, /*all_pairs_peer=*/true};
const EnvironmentFacts kTwoPcieGpus{2, false, true};
const EnvironmentFacts kNoGpu{0, false, true};

TEST(EnvironmentChecksTest, P2pDisabledIsAProblemOnlyWhereNvlinkConnectsTheGpus) {
  EXPECT_EQ(VerdictOf({{"NCCL_P2P_DISABLE", "1"}}, kTwoNvlinkGpus, "NCCL_P2P_DISABLE"), Verdict::kProblem);
  EXPECT_EQ(VerdictOf({{"NCCL_P2P_DISABLE", "1"}}, kTwoPcieGpus, "NCCL_P2P_DISABLE"), Verdict::kWarning);
  EXPECT_EQ(VerdictOf({{"NCCL_P2P_DISABLE", "0"}}, kTwoNvlinkGpus, "NCCL_P2P_DISABLE"), Verdict::kOk);
  EXPECT_EQ(VerdictOf({{"NCCL_P2P_DISABLE", "1"}}, kNoGpu, "NCCL_P2P_DISABLE"), Verdict::kOk);
  EXPECT_EQ(VerdictOf({{"NCCL_P2P_LEVEL", "LOC"}}, kTwoNvlinkGpus, "NCCL_P2P_LEVEL"), Verdict::kProblem);
  EXPECT_EQ(VerdictOf({{"NCCL_P2P_LEVEL", "NVL"}}, kTwoNvlinkGpus, "NCCL_P2P_LEVEL"), Verdict::kOk);
  const std::vector<Finding> f = JudgeEnvironment({{"NCCL_P2P_DISABLE", "1"}}, kTwoNvlinkGpus);
  EXPECT_NE(Find(f, "NCCL_P2P_DISABLE")->message.find("unset it"), std::string::npos);
}

TEST(EnvironmentChecksTest, NvlinkMulticastSwitchesAreWantedOffOnNvlinkGpus) {
  // Unset on two NVLink GPUs: one warning per switch the lent machines need.
  const std::vector<Finding> unset = JudgeEnvironment({}, kTwoNvlinkGpus);
  ASSERT_EQ(unset.size(), 3u);
  for (const Finding& f : unset) {
    EXPECT_EQ(f.verdict, Verdict::kWarning) << f.check;
    EXPECT_EQ(f.data["set"], false);
  }
  EXPECT_NE(Find(unset, "NCCL_NVLS_ENABLE")->message.find("export NCCL_NVLS_ENABLE=0"), std::string::npos);
  // Set off: fine; set on: a warning; no NVLink or one GPU: nothing to say.
  const std::map<std::string, std::string> off = {
      {"NCCL_NVLS_ENABLE", "0"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}, {"NVSHMEM_DISABLE_NVLS", "1"}};
  for (const Finding& f : JudgeEnvironment(off, kTwoNvlinkGpus)) EXPECT_EQ(f.verdict, Verdict::kOk) << f.check;
  EXPECT_EQ(VerdictOf({{"NCCL_NVLS_ENABLE", "1"}}, kTwoNvlinkGpus, "NCCL_NVLS_ENABLE"), Verdict::kWarning);
  EXPECT_TRUE(JudgeEnvironment({}, kTwoPcieGpus).empty());
  EXPECT_TRUE(JudgeEnvironment({}, {1, true, true}).empty());
}

TEST(EnvironmentChecksTest, EachVariableSaysWhatItDoes) {
  const std::map<std::string, std::string> vars = {{"NCCL_DEBUG", "INFO"},
                                                   {"CUDA_LAUNCH_BLOCKING", "1"},
                                                   {"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
                                                   {"NCCL_ALGO", "Tree"},
                                                   {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
                                                   {"CUDA_VISIBLE_DEVICES", "0,1"},
                                                   {"NCCL_SOME_NEW_KNOB", "3"},
                                                   {"NCCL_NVLS_ENABLE", "0"},
                                                   {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
                                                   {"NVSHMEM_DISABLE_NVLS", "1"}};
  const std::vector<Finding> f = JudgeEnvironment(vars, kTwoNvlinkGpus);
  EXPECT_EQ(f.size(), vars.size());
  EXPECT_EQ(Find(f, "NCCL_DEBUG")->verdict, Verdict::kOk);
  EXPECT_NE(Find(f, "NCCL_DEBUG")->message.find("log level"), std::string::npos);
  EXPECT_EQ(Find(f, "CUDA_LAUNCH_BLOCKING")->verdict, Verdict::kProblem);
  EXPECT_EQ(Find(f, "CUDA_DEVICE_MAX_CONNECTIONS")->verdict, Verdict::kWarning);
  EXPECT_EQ(Find(f, "NCCL_ALGO")->verdict, Verdict::kWarning);
  EXPECT_EQ(Find(f, "PYTORCH_CUDA_ALLOC_CONF")->verdict, Verdict::kWarning);
  EXPECT_EQ(Find(f, "CUDA_VISIBLE_DEVICES")->verdict, Verdict::kOk);
  EXPECT_EQ(Find(f, "NCCL_SOME_NEW_KNOB")->verdict, Verdict::kOk);
  EXPECT_EQ(Find(f, "CUDA_LAUNCH_BLOCKING")->message.rfind("CUDA_LAUNCH_BLOCKING=1: ", 0), 0u);
  EXPECT_TRUE(std::is_sorted(f.begin(), f.end(), [](const Finding& a, const Finding& b) { return a.check < b.check; }));
}

TEST(EnvironmentChecksTest, SharedMemoryOffWithoutPeerToPeerIsAProblem) {
  EXPECT_EQ(VerdictOf({{"NCCL_SHM_DISABLE", "1"}, {"NCCL_P2P_DISABLE", "1"}}, kTwoNvlinkGpus, "NCCL_SHM_DISABLE"),
            Verdict::kProblem);
  EXPECT_EQ(VerdictOf({{"NCCL_SHM_DISABLE", "1"}}, {2, false, /*all_pairs_peer=*/false}, "NCCL_SHM_DISABLE"),
            Verdict::kProblem);
  EXPECT_EQ(VerdictOf({{"NCCL_SHM_DISABLE", "1"}}, kTwoNvlinkGpus, "NCCL_SHM_DISABLE"), Verdict::kOk);
}

TEST(EnvironmentChecksTest, WithoutAGpuNothingButHiddenGpusMatters) {
  const std::vector<Finding> f =
      JudgeEnvironment({{"CUDA_LAUNCH_BLOCKING", "1"}, {"CUDA_VISIBLE_DEVICES", ""}, {"NCCL_ALGO", "Ring"}}, kNoGpu);
  EXPECT_EQ(Find(f, "CUDA_LAUNCH_BLOCKING")->verdict, Verdict::kOk);
  EXPECT_EQ(Find(f, "NCCL_ALGO")->verdict, Verdict::kOk);
  EXPECT_EQ(Find(f, "CUDA_VISIBLE_DEVICES")->verdict, Verdict::kWarning);  // why there is no GPU
}

TEST(EnvironmentChecksTest, RelevantEnvironmentKeepsNcclCudaAndAllocatorVariables) {
  std::string a = "NCCL_DEBUG=INFO", b = "CUDA_VISIBLE_DEVICES=0", c = "HOME=/root", d = "PYTORCH_CUDA_ALLOC_CONF=x=y",
              e = "MY_NCCL_THING=1";
  char* env[] = {a.data(), b.data(), c.data(), d.data(), e.data(), nullptr};
  const std::map<std::string, std::string> vars = RelevantEnvironment(env);
  EXPECT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(vars.at("PYTORCH_CUDA_ALLOC_CONF"), "x=y");
}

// Two H200s as the lent machine has them, unless a test changes something.
GpuSurvey TwoGpus(double link_bytes_per_s, bool peer, double bus_bytes_per_s) {
  GpuSurvey s;
  s.machine.driver_release = "580.65.06";
  s.machine.driver_api_version = 13000;
  s.machine.runtime_version = 13000;
  s.machine.nccl_loaded = s.machine.nccl_built = 22809;
  for (int i = 0; i < 2; ++i)
    s.machine.devices.push_back({i, "NVIDIA H200", 150e9, 149.4e9, 9, 0, 132, "0000:19:00.0"});
  s.links.push_back({0, 1, peer, link_bytes_per_s, link_bytes_per_s * 1.01, ""});
  HealthAllReduce r;
  r.gpus = 2;
  r.bytes = 256 << 20;
  r.sums_correct = true;
  r.bus_bytes_per_s = bus_bytes_per_s;
  r.seconds = r.bytes / bus_bytes_per_s;
  s.all_reduce = r;
  return s;
}

TEST(GpuChecksTest, NvlinkPairAndAHealthyAllReduceAreOk) {
  const std::vector<Finding> f = JudgeGpus(TwoGpus(390e9, true, 300e9));
  for (const Finding& x : f) EXPECT_EQ(x.verdict, Verdict::kOk) << x.check << ": " << x.message;
  EXPECT_EQ(Find(f, "link 0-1")->data["link"], "nvlink");
  EXPECT_NE(Find(f, "gpu 0")->message.find("compute capability 9.0"), std::string::npos);
  EXPECT_NE(Find(f, "nccl")->message.find("2.28.9 loaded, built against 2.28.9"), std::string::npos);
  EXPECT_EQ(DoctorExitStatus(f), 0);
}

TEST(GpuChecksTest, PcieAndHostPathsAreFlagged) {
  const std::vector<Finding> pcie = JudgeGpus(TwoGpus(25e9, true, 20e9));
  EXPECT_EQ(Find(pcie, "link 0-1")->verdict, Verdict::kWarning);
  EXPECT_EQ(Find(pcie, "link 0-1")->data["link"], "pcie");
  EXPECT_EQ(Find(pcie, "all-reduce")->verdict, Verdict::kOk);  // 80% of what that link carries
  const std::vector<Finding> host = JudgeGpus(TwoGpus(10e9, false, 8e9));
  EXPECT_EQ(Find(host, "link 0-1")->data["link"], "host");
  EXPECT_EQ(Find(host, "link 0-1")->verdict, Verdict::kWarning);
  EXPECT_FALSE(AnyNvlink(TwoGpus(10e9, false, 8e9).links));
  EXPECT_FALSE(AllPairsPeer(TwoGpus(10e9, false, 8e9).links));
}

TEST(GpuChecksTest, AllReduceFarBelowTheLinksOrWrongIsAProblem) {
  EXPECT_EQ(Find(JudgeGpus(TwoGpus(390e9, true, 150e9)), "all-reduce")->verdict, Verdict::kWarning);   // 38%
  EXPECT_EQ(Find(JudgeGpus(TwoGpus(390e9, true, 20e9)), "all-reduce")->verdict, Verdict::kProblem);    // 5%: not on NVLink
  GpuSurvey wrong = TwoGpus(390e9, true, 300e9);
  wrong.all_reduce->sums_correct = false;
  wrong.all_reduce->mismatch = "GPU 1 element 7 is 2.0, expected 3.0";
  const std::vector<Finding> f = JudgeGpus(wrong);
  EXPECT_EQ(Find(f, "all-reduce")->verdict, Verdict::kProblem);
  EXPECT_NE(Find(f, "all-reduce")->message.find("element 7"), std::string::npos);
  EXPECT_EQ(DoctorExitStatus(f), 1);
  GpuSurvey failed = TwoGpus(390e9, true, 300e9);
  failed.links[0].error = "cudaMemcpyPeerAsync failed: peer mapping resources exhausted";
  EXPECT_EQ(Find(JudgeGpus(failed), "link 0-1")->verdict, Verdict::kProblem);
}

TEST(GpuChecksTest, VersionsAndDevices) {
  GpuSurvey s = TwoGpus(390e9, true, 300e9);
  s.machine.driver_api_version = 12040;  // driver older than the runtime
  s.machine.nccl_loaded = 22703;
  s.machine.devices[1].cc_major = 7;
  s.machine.devices[0].free_bytes = 100e9;  // 50 GB used by someone else
  const std::vector<Finding> f = JudgeGpus(s);
  EXPECT_EQ(Find(f, "driver")->verdict, Verdict::kProblem);
  EXPECT_EQ(Find(f, "nccl")->verdict, Verdict::kWarning);
  EXPECT_EQ(Find(f, "gpu 1")->verdict, Verdict::kWarning);
  EXPECT_EQ(Find(f, "gpu 0")->verdict, Verdict::kWarning);
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12040), "12.4");
  EXPECT_EQ(NcclVersionString(22809), "2.28.9");
  EXPECT_EQ(NcclVersionString(2708), "2.7.8");
}

TEST(DoctorReportTest, NoGpuIsOneSkippedLinePerCheckAndExitsZero) {
  std::vector<Finding> f = NoGpuFindings("this llmplan was built without CUDA");
  f.push_back(LibTorchFinding("1.13.1", false, ""));
  f.push_back(HostFinding(24e9, 20e9, 2));
  EXPECT_EQ(DoctorExitStatus(f), 0);
  const std::string text = DoctorText(f);
  EXPECT_NE(text.find("  skipped  gpus"), std::string::npos) << text;
  EXPECT_NE(text.find("no GPU: this llmplan was built without CUDA;"), std::string::npos) << text;
  EXPECT_NE(text.find("llmplan doctor: 0 problems, 0 warnings, 5 skipped"), std::string::npos) << text;
  const nlohmann::json j = DoctorJson(f);
  EXPECT_EQ(j["exit_status"], 0);
  EXPECT_EQ(j["checks"].size(), f.size());
  EXPECT_EQ(j["checks"][0]["verdict"], "skipped");
  // A CPU build on a machine with an NVIDIA driver should say how to use it.
  EXPECT_EQ(LibTorchFinding("1.13.1", false, "580.65.06").verdict, Verdict::kWarning);
  EXPECT_EQ(HostFinding(24e9, 1e9, 2).verdict, Verdict::kWarning);
}

// Both wordings of /proc/driver/nvidia/version: the open kernel modules put
// "for x86_64" after "Module" (seen on the H200 machine as "driver for").
TEST(GpuChecksTest, DriverReleaseFromEitherKernelModulesVersionLine) {
  EXPECT_EQ(DriverReleaseFromVersionLine(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025"),
            "580.65.06");
  EXPECT_EQ(DriverReleaseFromVersionLine(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)"),
            "580.95.05");
  EXPECT_EQ(DriverReleaseFromVersionLine("no release here 12 x86_64"), "");
}

// Every pair of an 8-GPU node: `fast` inside the islands given, `slow`
// (with or without peer access) between them; `slowest` once, between 3 and 4.
std::vector<PeerLink> EightGpuLinks(const std::vector<std::vector<int>>& islands, double fast, double slow, bool peer,
                                    double slowest) {
  auto island_of = [&](int g) {
    for (size_t i = 0; i < islands.size(); ++i)
      if (std::find(islands[i].begin(), islands[i].end(), g) != islands[i].end()) return static_cast<int>(i);
    return -1;
  };
  std::vector<PeerLink> links;
  for (int a = 0; a < 8; ++a)
    for (int b = a + 1; b < 8; ++b) {
      const bool same = island_of(a) == island_of(b);
      const double rate = same ? fast : (a == 3 && b == 4 ? slowest : slow);
      links.push_back({a, b, same || peer, rate, rate * 1.02, ""});
    }
  return links;
}

TEST(GpuIslandsTest, TwoNvlinkIslandsJoinedByPcieAreFoundAndReported) {
  const std::vector<PeerLink> links = EightGpuLinks({{0, 1, 2, 3}, {4, 5, 6, 7}}, 390e9, 25e9, true, 21e9);
  const GpuIslands found = FindGpuIslands(8, links);
  ASSERT_EQ(found.islands.size(), 2u);
  EXPECT_EQ(found.islands[0], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(found.islands[1], (std::vector<int>{4, 5, 6, 7}));
  EXPECT_DOUBLE_EQ(found.cross_island_bytes_per_s, 21e9);  // the slowest pair between them
  // Islands of every other GPU (two sockets, GPUs interleaved) and across
  // sockets without peer access: found by the links, not by numbering.
  const GpuIslands interleaved = FindGpuIslands(8, EightGpuLinks({{0, 2, 4, 6}, {1, 3, 5, 7}}, 390e9, 12e9, false, 12e9));
  ASSERT_EQ(interleaved.islands.size(), 2u);
  EXPECT_EQ(interleaved.islands[0], (std::vector<int>{0, 2, 4, 6}));
  EXPECT_DOUBLE_EQ(interleaved.cross_island_bytes_per_s, 12e9);
  // The doctor says so, with the group size that stays inside one.
  GpuSurvey survey;
  for (int i = 0; i < 8; ++i) survey.machine.devices.push_back({i, "NVIDIA H200", 150e9, 149.4e9, 9, 0, 132, ""});
  survey.links = links;
  const std::vector<Finding> f = JudgeGpus(survey);
  const Finding* islands = Find(f, "islands");
  ASSERT_NE(islands, nullptr);
  EXPECT_EQ(islands->verdict, Verdict::kWarning);
  EXPECT_NE(islands->message.find("2 GPU islands {0-3}, {4-7}, joined at 21"), std::string::npos) << islands->message;
  EXPECT_NE(islands->message.find("hybrid_shard with groups of 4"), std::string::npos) << islands->message;
}

TEST(GpuIslandsTest, APcieOnlyBoxAndAnNvlinkSwitchAreOneIsland) {
  for (double rate : {25e9, 390e9}) {
    const GpuIslands found = FindGpuIslands(8, EightGpuLinks({{0, 1, 2, 3, 4, 5, 6, 7}}, rate, rate, true, rate));
    ASSERT_EQ(found.islands.size(), 1u) << rate;
    EXPECT_EQ(found.islands[0].size(), 8u);
    EXPECT_EQ(found.cross_island_bytes_per_s, 0);
  }
  // A pair whose copy failed joins nothing: that GPU is an island of its own.
  std::vector<PeerLink> links = EightGpuLinks({{0, 1, 2, 3, 4, 5, 6, 7}}, 390e9, 390e9, true, 390e9);
  for (PeerLink& l : links)
    if (l.a == 7 || l.b == 7) l.error = "cudaMemcpyPeerAsync: an illegal memory access";
  EXPECT_EQ(FindGpuIslands(8, links).islands.size(), 2u);
}

// NCCL tuning's choice, on timings given: the setting fastest over the
// plan's collectives (each counted as often as a step issues it) wins when
// it takes kWorthSetting or more off NCCL's own choice.
TEST(NcclTuningTest, TheFastestSettingOverThePlansCollectivesWinsWhenItIsWorthSetting) {
  const std::vector<PlannedCollective> planned = {{CollectiveOp::kAllGather, 64e6, 32},
                                                  {CollectiveOp::kAllReduce, 4, 1}};
  const std::vector<NcclSetting> tried = NcclSettingsToTry();
  ASSERT_EQ(tried.front().Name(), "default");
  const std::string tree = "NCCL_ALGO=Tree NCCL_PROTO=LL128", ring_ll = "NCCL_ALGO=Ring NCCL_PROTO=LL";
  NcclTimings t;
  t["default"] = {1.0e-3, 20e-6};
  t[tree] = {0.9e-3, 30e-6};     // 10% faster on the gathers that dominate
  t[ring_ll] = {1.2e-3, 10e-6};  // fastest on the tiny all-reduce only
  NcclRecommendation r = RecommendNcclSetting(planned, tried, t);
  EXPECT_TRUE(r.tuned);
  EXPECT_EQ(r.setting.Name(), tree);
  EXPECT_NEAR(r.default_step_s, 32 * 1.0e-3 + 20e-6, 1e-12);
  EXPECT_NEAR(r.best_step_s, 32 * 0.9e-3 + 30e-6, 1e-12);
  EXPECT_EQ(r.fastest[0].first, tree);
  EXPECT_NEAR(r.fastest[0].second, 0.1, 1e-9);
  EXPECT_EQ(r.fastest[1].first, ring_ll);
  // 2% is not worth setting a variable: NCCL decides.
  t[tree] = {0.98e-3, 20e-6};
  r = RecommendNcclSetting(planned, tried, t);
  EXPECT_FALSE(r.tuned);
  EXPECT_TRUE(r.setting.variables.empty());
  // A setting whose child failed has no timings and is passed over; without NCCL's own there is no baseline.
  t.erase(ring_ll);
  EXPECT_NO_THROW(RecommendNcclSetting(planned, tried, t));
  t.erase("default");
  EXPECT_THROW(RecommendNcclSetting(planned, tried, t), std::invalid_argument);
}

TEST(NcclTuningTest, ThePlansCollectivesAreItsDistinctSizesWithTheirCounts) {
  Plan plan;
  plan.model = PresetModel("llama3.2-1b");
  plan.profile = "h200-sxm";
  plan.gpus = 8;
  plan.strategy = ShardingStrategy::kFullShard;
  plan.seq_len = 2048;
  plan.micro_batch = 1;
  plan.grad_accum = 2;
  NormaliseGrouping(plan);
  const StepProgram program = BuildStepProgram(plan, LoadHardwareProfile("h200-sxm"));
  const std::vector<PlannedCollective> planned = PlannedCollectives(program);
  int collectives = 0, counted = 0;
  for (const StepOp& op : program.ops)
    collectives += op.work.group_size > 1 && (op.kind == OpKind::kAllGather || op.kind == OpKind::kReduceScatter ||
                                              op.kind == OpKind::kAllReduce || op.kind == OpKind::kAllReduceGradNorm ||
                                              op.kind == OpKind::kAllReduceLoss);
  for (const PlannedCollective& c : planned) counted += c.per_step;
  EXPECT_EQ(counted, collectives);
  EXPECT_LT(planned.size(), static_cast<size_t>(collectives));  // the blocks' gathers share one size
  plan.gpus = 1;
  NormaliseGrouping(plan);
  EXPECT_TRUE(PlannedCollectives(BuildStepProgram(plan, LoadHardwareProfile("h200-sxm"))).empty());
}

TEST(NcclTuningTest, RunSetsTheProfilesSettingsUnlessTheUserDid) {
  HardwareProfile profile = LoadHardwareProfile("h200-sxm");
  profile.nccl_settings = {{"NCCL_ALGO", "Tree"}, {"NCCL_PROTO", "LL128"}};
  std::map<std::string, std::string> env = {{"NCCL_PROTO", "Simple"}};
  auto get = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto set = [&](const std::string& name, const std::string& value) { env[name] = value; };
  const std::vector<std::string> lines = ApplyNcclSettings(profile, get, set);
  EXPECT_EQ(env["NCCL_ALGO"], "Tree");
  EXPECT_EQ(env["NCCL_PROTO"], "Simple");  // the user's stands
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("NCCL_ALGO=Tree (profile h200-sxm: measured faster", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1], "NCCL_PROTO=Simple (yours; profile h200-sxm recommends LL128)");
  // Applied again (a rank that inherited them): nothing to say.
  env["NCCL_PROTO"] = "LL128";
  EXPECT_TRUE(ApplyNcclSettings(profile, get, set).empty());
  // The profile keeps them, and refuses a variable it may not set.
  nlohmann::json j = HardwareProfileToJson(profile);
  EXPECT_EQ(HardwareProfileFromJson(j, "test").nccl_settings, profile.nccl_settings);
  j["collectives"]["nccl"]["settings"]["NCCL_IB_HCA"] = "mlx5_0";
  EXPECT_THROW(HardwareProfileFromJson(j, "test"), UserError);
}

}  // namespace
}  // namespace llmplan::executor
