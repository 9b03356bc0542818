// NVMe offload in the planner: the plan field and its JSON, the host memory
// it saves and the disk bytes it needs, the CPU optimizer op's time with the
// disk streamed under it, the refusal when the disk sets the pace, the
// one-line error for a profile without disk rates, and the search turning to
// NVMe only where the host is what does not fit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/user_error.h"
#include "planner/cost_model.h"
#include "planner/nvme_offload.h"
#include "planner/plan_search.h"
#include "planner/program_builder.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using testing::Profile;

// An H200 profile with a measured local SSD (a PCIe 4 drive's rates).
HardwareProfile H200WithDisk(double read = 6.5e9, double write = 5.0e9) {
  HardwareProfile p = Profile("h200-sxm");
  p.nvme_read_bytes_per_s = read;
  p.nvme_write_bytes_per_s = write;
  return p;
}

// Llama-3-8B on one H200 with the optimizer offloaded, 64 sequences per step.
Plan EightBOffloaded(OffloadTier tier) {
  Plan plan;
  plan.model = PresetModel("llama3-8b");
  plan.profile = "h200-sxm";
  plan.gpus = 1;
  plan.gpus_per_node = 1;
  plan.strategy = ShardingStrategy::kFullShard;
  NormaliseGrouping(plan);
  plan.seq_len = 4096;
  plan.micro_batch = 2;
  plan.grad_accum = 32;
  plan.checkpoint_layers = ParseLayerList("all", plan.model.layers);
  plan.offload = Offload::kOptimizer;
  plan.offload_to = tier;
  plan.Validate();
  return plan;
}

TEST(NvmeOffloadPlan, JsonRoundTripAndOldPlansLoad) {
  const Plan nvme = EightBOffloaded(OffloadTier::kNvme);
  const nlohmann::json j = PlanToJson(nvme);
  EXPECT_EQ(j["offload_to"], "nvme");
  EXPECT_EQ(PlanFromJson(j, "test").offload_to, OffloadTier::kNvme);
  nlohmann::json old = j;
  old.erase("offload_to");  // a plan written before the field existed
  EXPECT_EQ(PlanFromJson(old, "test").offload_to, OffloadTier::kHost);
  old["offload_to"] = "ssd";
  EXPECT_THROW(PlanFromJson(old, "test"), UserError);
}

TEST(NvmeOffloadPlan, OnlyWithAnOffloadedOptimizer) {
  Plan plan = EightBOffloaded(OffloadTier::kNvme);
  plan.offload = Offload::kParams;  // the optimizer stays on the GPU
  try {
    plan.Validate();
    FAIL() << "offload params to nvme was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("offload optimizer or optimizer+params"), std::string::npos) << e.what();
  }
  plan.offload = Offload::kOptimizerAndParams;
  EXPECT_NO_THROW(plan.Validate());
  EXPECT_TRUE(plan.OptimizerStateOnNvme());
}

TEST(NvmeOffloadPlan, FileLayoutIsAlignedBlocks) {
  const int64_t block = NvmeBlockBytes(kNvmeBlockElements);
  EXPECT_EQ(block, 8 * kNvmeBlockElements);
  EXPECT_EQ(block % kNvmeAlignment, 0);
  EXPECT_EQ(NvmeBlockBytes(1), 2 * kNvmeAlignment);  // m and v each take a whole aligned page
  EXPECT_EQ(NvmeUnitBytes(0), 0);
  EXPECT_EQ(NvmeUnitBytes(kNvmeBlockElements + 1), block + 2 * kNvmeAlignment);
  EXPECT_EQ(NvmeFileBytes({kNvmeBlockElements, 1}), block + 2 * kNvmeAlignment);
  EXPECT_DOUBLE_EQ(NvmeStagingBytes({1, 2 * kNvmeBlockElements}), kNvmeBuffers * static_cast<double>(block));
  EXPECT_DOUBLE_EQ(NvmeStagingBytes({1, 1000}), kNvmeBuffers * 2.0 * kNvmeAlignment);  // small units, small blocks
}

// The host keeps the master, gradient and parameter staging, and the blocks
// the state streams through; m and v (8 bytes per parameter) go to the file.
TEST(NvmeOffloadPricing, HostMemoryLosesTheStateTheDiskGainsIt) {
  const HardwareProfile profile = H200WithDisk();
  const StepProgram host = BuildStepProgram(EightBOffloaded(OffloadTier::kHost), profile);
  const StepProgram nvme = BuildStepProgram(EightBOffloaded(OffloadTier::kNvme), profile);
  EXPECT_GT(host.host.optimizer_state, 0);
  EXPECT_EQ(nvme.host.optimizer_state, 0);
  std::vector<int64_t> shards;
  for (const Unit& u : nvme.units) shards.push_back(u.padded_params);
  EXPECT_DOUBLE_EQ(nvme.host.nvme_staging, 96.0 * (1 << 20));  // three blocks of 32 MiB
  EXPECT_DOUBLE_EQ(nvme.host.Total(), host.host.Total() - host.host.optimizer_state + NvmeStagingBytes(shards));
  EXPECT_DOUBLE_EQ(nvme.host.nvme_state, static_cast<double>(NvmeFileBytes(shards)));
  // Within the alignment of each unit's last block of m + v.
  EXPECT_NEAR(nvme.host.nvme_state, host.host.optimizer_state, 2.0 * kNvmeAlignment * nvme.units.size());
  EXPECT_EQ(host.host.nvme_state, 0);
}

// The CPU optimizer op: the update and the disk overlap, the first read and
// the last write of each unit do not.
TEST(NvmeOffloadPricing, CpuOptimizerTakesTheLongerOfUpdateAndDiskPlusTheEdges) {
  const HardwareProfile profile = H200WithDisk();
  const CostModel cost(profile);
  const StepProgram nvme = BuildStepProgram(EightBOffloaded(OffloadTier::kNvme), profile);
  const StepProgram host = BuildStepProgram(EightBOffloaded(OffloadTier::kHost), profile);
  int checked = 0;
  for (size_t i = 0; i < nvme.ops.size(); ++i) {
    const StepOp& op = nvme.ops[i];
    if (op.kind != OpKind::kCpuOptimizerStep) continue;
    const double params = op.work.cpu_adam_params;
    EXPECT_DOUBLE_EQ(op.work.nvme_bytes, 8 * params);
    const double adam = params / profile.cpu_adam_alone_params_per_s;
    const double disk = 8 * params / profile.nvme_read_bytes_per_s + 8 * params / profile.nvme_write_bytes_per_s;
    const double block = 8 * std::min(params, static_cast<double>(kNvmeBlockElements));
    const double edge = block / profile.nvme_read_bytes_per_s + block / profile.nvme_write_bytes_per_s;
    EXPECT_NEAR(cost.Seconds(op), edge + std::max(adam, disk - edge), 1e-12);
    EXPECT_GT(cost.Seconds(op), cost.Seconds(host.ops[i])) << op.name;  // the same op without the disk
    ++checked;
  }
  EXPECT_EQ(checked, 34);  // embedding, 32 blocks, head
}

TEST(NvmeOffloadPricing, EstimateReportsTheDiskAndFitsTheHostBudget) {
  HardwareProfile profile = H200WithDisk();
  Plan host = EightBOffloaded(OffloadTier::kHost), nvme = EightBOffloaded(OffloadTier::kNvme);
  // 80 GiB of host memory: the host offload's 12 bytes per parameter (89.7 GiB) do not fit,
  // NVMe's 4 and the blocks do.
  host.host_memory_per_node_bytes = nvme.host_memory_per_node_bytes = 80.0 * (1 << 30);
  const Estimate on_host = EvaluatePlan(host, profile), on_nvme = EvaluatePlan(nvme, profile);
  EXPECT_FALSE(on_host.fits);
  EXPECT_NE(on_host.why_not.find("host memory"), std::string::npos) << on_host.why_not;
  EXPECT_TRUE(on_nvme.fits) << on_nvme.why_not;
  EXPECT_GT(on_nvme.memory.nvme_bytes, 60e9);
  EXPECT_GT(on_nvme.time.nvme_seconds, 0);
  EXPECT_LE(on_nvme.time.nvme_seconds, kNvmeMaxStepFraction * on_nvme.time.step_seconds);
  EXPECT_GE(on_nvme.time.step_seconds, on_host.time.step_seconds);  // the disk is never free
}

// Refused when reading and writing the state takes more than half the step:
// the same plan with one micro-batch per step, or a slow disk.
TEST(NvmeOffloadPricing, RefusedWhenTheDiskIsTooSlowForTheStep) {
  Plan plan = EightBOffloaded(OffloadTier::kNvme);
  plan.grad_accum = 1;
  const Estimate short_step = EvaluatePlan(plan, H200WithDisk());
  EXPECT_FALSE(short_step.fits);
  EXPECT_NE(short_step.why_not.find("the disk is too slow for the step"), std::string::npos) << short_step.why_not;
  EXPECT_NE(short_step.why_not.find("more gradient accumulation"), std::string::npos) << short_step.why_not;
  const Estimate slow_disk = EvaluatePlan(EightBOffloaded(OffloadTier::kNvme), H200WithDisk(2e8, 2e8));
  EXPECT_FALSE(slow_disk.fits);
  EXPECT_NE(slow_disk.why_not.find("the disk is too slow"), std::string::npos) << slow_disk.why_not;
}

TEST(NvmeOffloadPricing, ProfileWithoutDiskRatesIsOneLineError) {
  try {
    EvaluatePlan(EightBOffloaded(OffloadTier::kNvme), Profile("h200-sxm"));
    FAIL() << "priced without disk rates";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no NVMe read/write rates"), std::string::npos) << what;
    EXPECT_NE(what.find("--nvme-dir"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(NvmeOffloadProfile, RatesRoundTripAndDefaultToNotMeasured) {
  EXPECT_EQ(Profile("h200-sxm").nvme_read_bytes_per_s, 0);
  const HardwareProfile p = H200WithDisk();
  const HardwareProfile back = HardwareProfileFromJson(HardwareProfileToJson(p), "test");
  EXPECT_EQ(back.nvme_read_bytes_per_s, 6.5e9);
  EXPECT_EQ(back.nvme_write_bytes_per_s, 5.0e9);
}

SearchResult Search(const std::string& model, const HardwareProfile& profile, double host_gib, int64_t global_batch,
                    std::optional<OffloadTier> tier = std::nullopt) {
  SearchRequest req;
  req.model = PresetModel(model);
  req.profile = "h200-sxm";
  req.gpus = 1;
  req.seq_len = 4096;
  req.global_batch = global_batch;
  req.host_memory_per_node_bytes = host_gib * (1 << 30);
  req.offload_to = tier;
  return SearchPlans(req, profile, [&](const Plan& p) { return EvaluatePlan(p, profile); });
}

// Qwen2.5-14B on one H200: only an offloaded optimizer fits the device, and
// its 12 bytes per parameter on the host (165 GiB and the staging) need a big
// host.
TEST(NvmeOffloadSearch, TurnsToNvmeOnlyWhereTheHostIsShort) {
  // Plenty of host memory: the host, never the disk.
  const SearchResult roomy = Search("qwen2.5-14b", H200WithDisk(), 400, 128);
  ASSERT_TRUE(roomy.found) << roomy.why_none;
  EXPECT_TRUE(OffloadsOptimizer(roomy.best.plan.offload));
  EXPECT_FALSE(roomy.best.plan.OptimizerStateOnNvme());
  // 150 GiB: the offloaded state does not fit the host; with m and v on NVMe
  // (4 bytes per parameter left on the host: 55 GiB) it does.
  const SearchResult short_host = Search("qwen2.5-14b", H200WithDisk(), 150, 128);
  ASSERT_TRUE(short_host.found) << short_host.why_none;
  EXPECT_TRUE(short_host.best.plan.OptimizerStateOnNvme());
  EXPECT_LE(short_host.best.memory.host_bytes, short_host.best.memory.host_capacity_bytes);
  // Without disk rates the search does not offer it.
  const SearchResult no_disk = Search("qwen2.5-14b", Profile("h200-sxm"), 150, 128);
  EXPECT_FALSE(no_disk.found);
  EXPECT_NE(no_disk.why_none.find("host memory"), std::string::npos) << no_disk.why_none;
}

TEST(NvmeOffloadSearch, PinnedNvmeOffloadsOnlyTheOptimizer) {
  const SearchResult pinned = Search("llama3-8b", H200WithDisk(), 400, 64, OffloadTier::kNvme);
  ASSERT_TRUE(pinned.found) << pinned.why_none;
  EXPECT_TRUE(pinned.best.plan.OptimizerStateOnNvme());
  // A step too short for the disk: nothing fits, and the reason says so.
  const SearchResult one_batch = Search("llama3-8b", H200WithDisk(), 400, 1, OffloadTier::kNvme);
  EXPECT_FALSE(one_batch.found);
  EXPECT_NE(one_batch.why_none.find("disk is too slow"), std::string::npos) << one_batch.why_none;
}

}  // namespace
}  // namespace llmplan
