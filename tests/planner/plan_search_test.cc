// Plan search: whatever it returns fits (device and host), honours every pin,
// agrees bit for bit with EvaluatePlan, and --gpus auto returns the fewest
// GPUs that fit.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "planner/plan_search.h"
#include "base/user_error.h"
#include "simulator/evaluate.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

struct Searched {
  HardwareProfile profile;
  SearchResult result;
};

SearchRequest Request(const std::string& model, const std::string& profile, int gpus, int64_t seq, int64_t global_batch) {
  SearchRequest r;
  r.model = PresetModel(model);
  r.profile = profile;
  r.gpus = gpus;
  r.seq_len = seq;
  r.global_batch = global_batch;
  return r;
}

Searched Search(const SearchRequest& req) {
  Searched s{testing::Profile(req.profile), {}};
  const HardwareProfile& p = s.profile;
  s.result = SearchPlans(req, p, [&](const Plan& plan) { return EvaluatePlan(plan, p); });
  return s;
}

// fits must mean exactly: device peak within capacity, host bytes within
// host capacity, and the allocator replay free of retries (a plan whose
// reserved peak fits can still make the caching allocator free its cache
// and retry when its blocks fragment: simulator/evaluate.cc refuses it).
void ExpectFitsIsHonest(const Estimate& e) {
  bool device_ok = e.memory.device_peak_bytes <= e.memory.capacity_bytes;
  bool host_ok = e.memory.host_bytes <= e.memory.host_capacity_bytes;
  bool allocator_ok = e.why_not.find("caching allocator") == std::string::npos;
  EXPECT_EQ(e.fits, device_ok && host_ok && allocator_ok) << e.why_not;
  if (!e.fits) {
    EXPECT_FALSE(e.why_not.empty());
  }
}

void ExpectAllFeasibleFit(const Searched& s) {
  ASSERT_TRUE(s.result.found) << s.result.why_none;
  const Estimate& best = s.result.best;
  EXPECT_TRUE(best.fits);
  EXPECT_LE(best.memory.device_peak_bytes, best.memory.capacity_bytes);
  EXPECT_LE(best.memory.host_bytes, best.memory.host_capacity_bytes);
  EXPECT_DOUBLE_EQ(best.memory.capacity_bytes, s.profile.memory_bytes * s.profile.usable_fraction);
  EXPECT_GT(best.tokens_per_second_per_gpu, 0);
  ExpectFitsIsHonest(best);
  for (const auto& alt : s.result.alternatives) {
    ExpectFitsIsHonest(alt.estimate);
    if (alt.estimate.fits) {
      EXPECT_LE(alt.estimate.memory.device_peak_bytes, alt.estimate.memory.capacity_bytes);
      EXPECT_LE(alt.estimate.memory.host_bytes, alt.estimate.memory.host_capacity_bytes);
      // The best is the fastest feasible plan.
      EXPECT_LE(alt.estimate.tokens_per_second_per_gpu, best.tokens_per_second_per_gpu);
    }
    EXPECT_FALSE(alt.reason.empty());
  }
}

// The search's figures are EvaluatePlan's, to the last bit.
void ExpectEqualsEvaluatePlan(const Searched& s) {
  Estimate again = EvaluatePlan(s.result.best.plan, s.profile);
  EXPECT_EQ(again.time.step_seconds, s.result.best.time.step_seconds);
  EXPECT_EQ(again.memory.device_peak_bytes, s.result.best.memory.device_peak_bytes);
  EXPECT_EQ(again.memory.peak_allocated_bytes, s.result.best.memory.peak_allocated_bytes);
  EXPECT_EQ(again.tokens_per_second_per_gpu, s.result.best.tokens_per_second_per_gpu);
  EXPECT_EQ(again.fits, s.result.best.fits);
  for (const auto& alt : s.result.alternatives) {
    Estimate a = EvaluatePlan(alt.estimate.plan, s.profile);
    EXPECT_EQ(a.time.step_seconds, alt.estimate.time.step_seconds);
    EXPECT_EQ(a.memory.device_peak_bytes, alt.estimate.memory.device_peak_bytes);
  }
}

TEST(PlanSearchTest, Llama3_8bOn8H100) {
  Searched s = Search(Request("llama3-8b", "h100-sxm-80g", 8, 8192, 256));
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  const Plan& p = s.result.best.plan;
  EXPECT_EQ(p.gpus, 8);
  EXPECT_EQ(p.seq_len, 8192);
  EXPECT_EQ(p.GlobalBatch(), 256);  // micro_batch * grad_accum * 8
  EXPECT_NO_THROW(p.Validate());
}

TEST(PlanSearchTest, Llama3_70bOn64H100) {
  Searched s = Search(Request("llama3-70b", "h100-sxm-80g", 64, 8192, 512));
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  EXPECT_EQ(s.result.best.plan.GlobalBatch(), 512);
}

TEST(PlanSearchTest, TinyModelOnCpu) {
  Searched s = Search(Request("tiny-llama", "cpu", 2, 256, 8));
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  EXPECT_EQ(s.result.best.plan.GlobalBatch(), 8);
  // CPU profile: no CUDA context in the device total.
  EXPECT_EQ(s.profile.device_kind, "cpu");
}

TEST(PlanSearchTest, Llama3_8bOnOneL40sNeedsOffloadOrCheckpointing) {
  // 8.03e9 params * 16 bytes of state = 128 GB: a quarter (32.1 GB) plus the
  // activations of seq 4096 does not leave room on a 42.7 GiB-usable card: on
  // 4 GPUs, whatever the search picks must offload.
  Searched s = Search(Request("llama3-8b", "l40s-pcie", 4, 4096, 64));
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  EXPECT_NE(s.result.best.plan.offload, Offload::kNone);
}

TEST(PlanSearchTest, PinsAreHonoured) {
  auto base = Request("llama3-8b", "h100-sxm-80g", 8, 8192, 256);  // 32 sequences per GPU
  auto check_all = [](const Searched& s, auto pred) {
    ASSERT_TRUE(s.result.found) << s.result.why_none;
    EXPECT_TRUE(pred(s.result.best.plan));
    for (const auto& a : s.result.alternatives) EXPECT_TRUE(pred(a.estimate.plan));
  };
  {
    auto r = base;
    r.strategy = ShardingStrategy::kShardGradOp;
    Searched s = Search(r);
    ExpectAllFeasibleFit(s);
    check_all(s, [](const Plan& p) { return p.strategy == ShardingStrategy::kShardGradOp; });
  }
  {
    auto r = base;
    r.micro_batch = 2;  // then grad_accum = 32 / 2 = 16
    Searched s = Search(r);
    ExpectAllFeasibleFit(s);
    check_all(s, [](const Plan& p) { return p.micro_batch == 2 && p.grad_accum == 16; });
  }
  {
    auto r = base;
    r.grad_accum = 8;  // then micro_batch = 32 / 8 = 4
    Searched s = Search(r);
    ExpectAllFeasibleFit(s);
    check_all(s, [](const Plan& p) { return p.grad_accum == 8 && p.micro_batch == 4; });
  }
  {
    auto r = base;
    r.checkpoint_layers = ParseLayerList("0-15,31", 32);
    ASSERT_EQ(r.checkpoint_layers->size(), 17u);
    Searched s = Search(r);
    ASSERT_TRUE(s.result.found) << s.result.why_none;
    std::vector<int> expected;
    for (int i = 0; i <= 15; ++i) expected.push_back(i);
    expected.push_back(31);
    check_all(s, [&](const Plan& p) { return p.checkpoint_layers == expected; });
  }
  {
    auto r = base;
    r.offload = Offload::kOptimizer;
    Searched s = Search(r);
    ExpectAllFeasibleFit(s);
    check_all(s, [](const Plan& p) { return p.offload == Offload::kOptimizer; });
    EXPECT_GT(s.result.best.memory.host_bytes, 0);
  }
  {
    auto r = base;
    r.gpus = 16;
    r.strategy = ShardingStrategy::kHybridShard;
    r.shard_group_size = 4;
    Searched s = Search(r);
    ExpectAllFeasibleFit(s);
    check_all(s, [](const Plan& p) { return p.strategy == ShardingStrategy::kHybridShard && p.shard_group_size == 4; });
  }
}

TEST(PlanSearchTest, ContradictoryPinsThrowUserError) {
  auto r = Request("llama3-8b", "h100-sxm-80g", 8, 8192, 256);
  r.micro_batch = 3;  // 32 per GPU is not a multiple of 3
  EXPECT_THROW(Search(r), UserError);
  auto q = Request("llama3-8b", "h100-sxm-80g", 8, 8192, 12);  // not a multiple of 8 GPUs
  EXPECT_THROW(Search(q), UserError);
  auto z = Request("llama3-8b", "h100-sxm-80g", 8, 0, 256);
  EXPECT_THROW(Search(z), UserError);
}

TEST(PlanSearchTest, NothingFitsIsReportedNotFound) {
  auto r = Request("llama3.1-405b", "l40s-pcie", 1, 4096, 0);
  r.offload = Offload::kNone;
  Searched s = Search(r);
  EXPECT_FALSE(s.result.found);
  EXPECT_FALSE(s.result.why_none.empty());
  EXPECT_FALSE(s.result.best.fits);
}

// --gpus auto returns a count g; each count `smaller(g)` lists (counts auto
// would have tried below g) must not fit when searched with the count pinned.
// Returns g.
int ExpectFewestGpus(SearchRequest req, const std::function<std::vector<int>(int)>& smaller) {
  req.gpus = 0;
  Searched s = Search(req);
  EXPECT_TRUE(s.result.found) << s.result.why_none;
  if (!s.result.found) return 0;
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  const int g = s.result.best.plan.gpus;
  for (int fewer : smaller(g)) {
    if (fewer >= g) continue;
    SearchRequest pinned = req;
    pinned.gpus = fewer;
    Searched t = Search(pinned);
    EXPECT_FALSE(t.result.found) << fewer << " GPUs fit, but --gpus auto returned " << g;
  }
  // The count returned, searched on its own, gives the same plan.
  SearchRequest pinned = req;
  pinned.gpus = g;
  Searched t = Search(pinned);
  EXPECT_TRUE(t.result.found);
  EXPECT_EQ(t.result.best.time.step_seconds, s.result.best.time.step_seconds);
  return g;
}

TEST(PlanSearchTest, AutoGpusReturnsTheFewestThatFit) {
  // Counts tried: powers of two below the node (1, 2, 4), then multiples of
  // the node size; a global batch of 64 keeps only its divisors.
  auto all_below = [](std::vector<int> v) { return [v](int) { return v; }; };
  // Llama-3-8B (N = 8.03e9) on L40S (42.7 GiB usable, 64 GiB host per GPU):
  // (Offloaded state pins 12 B/param of master and AdamW state, 14 with the bf16 shard
  // streamed, plus its staging: per unit 6 B/param (4 streamed), or where the host is short
  // two staging slots of the largest unit's shard, E = 525.3e6 for 8B.)
  //   1 GPU: offload optimizer keeps grads 4 + bf16 params 2 = 6 B/param = 48.2 GB on the GPU: no;
  //          optimizer+params keeps the 32.1 GB gradient and needs 14 B x N + 8 B x E = 116.6 GB
  //          of host: no.
  //   2 GPUs: offload optimizer: 24.1 GB on the GPU + activations; staged per unit
  //           18 B x N / 2 = 72.3 GB of host (> 68.7), through the slots 12 B x N / 2 +
  //           12 B x E / 2 = 51.3 GB: yes.
  // Llama-3-70B (N = 70.55e9) on H100 (75.7 GiB usable, 256 GiB host per GPU):
  //   4 GPUs: optimizer offload 6 B x N / 4 = 105.8 GB on the GPU: no; optimizer+params keeps
  //           the 4 B x N / 4 = 70.6 GB gradient shard on the GPU, beside the activations: no.
  //   8 GPUs: optimizer+params: yes.
  EXPECT_EQ(ExpectFewestGpus(Request("llama3-8b", "l40s-pcie", 0, 4096, 64), all_below({1, 2, 4})), 2);
  EXPECT_EQ(ExpectFewestGpus(Request("llama3-70b", "h100-sxm-80g", 0, 4096, 64), all_below({1, 2, 4, 8})), 8);
  // Pinned to no offload, 70B needs 16 bytes/param of state (70.55e9 * 16 B = 1.03 TiB): far more
  // than 8 GPUs. Counts that divide 1024 up to 64: 1, 2, 4, 8, 16, 32, 64. The next
  // smaller candidate (g / 2) is searched on its own; fewer are hopeless by the 16 bytes/param
  // argument and slow to search (~1024 micro-batches per step).
  auto r = Request("llama3-70b", "h100-sxm-80g", 0, 4096, 1024);
  r.offload = Offload::kNone;
  r.max_gpus = 64;
  EXPECT_GT(ExpectFewestGpus(r, [](int g) { return std::vector<int>{g / 2}; }), 8);
}

TEST(PlanSearchTest, AutoGpusWithHugeMaxGpusTerminates) {
  // --max-gpus 2147483647 must not overflow the candidate-count loop (int g +=
  // g/8 past INT_MAX), which would never return.
  auto r = Request("tiny-llama", "cpu", 0, 128, 0);
  r.max_gpus = std::numeric_limits<int>::max();
  Searched s = Search(r);
  ASSERT_TRUE(s.result.found);
  EXPECT_EQ(s.result.best.plan.gpus, 1);  // a 250k-parameter model fits on one device
}

TEST(PlanSearchTest, GlobalBatchSuggestionNeverOverflows) {
  auto r = Request("tiny-llama", "cpu", 2, 128, std::numeric_limits<int64_t>::max());  // odd
  try {
    Search(r);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find("such as -"), std::string::npos) << m;
    // 9223372036854775807 rounded down to a multiple of 2 (rounding up would overflow).
    EXPECT_NE(m.find("such as 9223372036854775806"), std::string::npos) << m;
  }
  auto q = Request("tiny-llama", "cpu", 8, 128, 12);
  try {
    Search(q);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("such as 16"), std::string::npos) << e.what();  // 12 -> next multiple of 8
  }
}

TEST(PlanSearchTest, MicroBatchOneOverTheGradAccumLimitIsSkippedNotFatal) {
  // 65,542 sequences per GPU = 2 x 32,771 (a prime): micro-batch 1 would need
  // grad_accum 65,542 (> Plan's 65,536), micro-batch 2 needs 32,771, and no
  // other divisor is <= 256. The search must skip the first, not abort
  // with "plan: grad_accum must be between 1 and 65536". (The search tries at most
  // SearchGradAccumLimit micro-batches unless grad_accum is pinned, as here.)
  auto r = Request("tiny-llama", "cpu", 1, 16, 65542);
  r.grad_accum = 32771;
  r.strategy = ShardingStrategy::kFullShard;
  r.offload = Offload::kNone;
  r.checkpoint_layers = std::vector<int>{};
  Searched s = Search(r);
  ASSERT_TRUE(s.result.found) << s.result.why_none;
  EXPECT_EQ(s.result.best.plan.micro_batch, 2);
  EXPECT_EQ(s.result.best.plan.grad_accum, 32771);
}

TEST(PlanSearchTest, ChosenCheckpointSetIsTheShortestFittingPrefix) {
  // The search ranks blocks once by how much checkpointing each lowers the
  // activation peak per second of recompute (CheckpointOrder), then takes the
  // shortest prefix of that order that fits: one block fewer must overflow.
  for (auto req : {Request("llama3-70b", "h100-sxm-80g", 16, 4096, 64), Request("qwen2.5-14b", "h100-sxm-80g", 8, 8192, 64)}) {
    Searched s = Search(req);
    ASSERT_TRUE(s.result.found) << s.result.why_none;
    const Plan& best = s.result.best.plan;
    ASSERT_FALSE(best.checkpoint_layers.empty()) << req.model.name << ": the case should need checkpointing";
    const BlockActivationBytes act = BlockActivations(best, s.profile);
    const std::vector<LayerCheckpointCost> layers(best.model.layers, {act.full, act.checkpointed, 1.0});
    const std::vector<int> order = CheckpointOrder(layers, act.head, act.working, 0.0);
    const size_t k = best.checkpoint_layers.size();
    ASSERT_LE(k, order.size());
    std::vector<int> prefix(order.begin(), order.begin() + static_cast<long>(k));
    std::sort(prefix.begin(), prefix.end());
    EXPECT_EQ(best.checkpoint_layers, prefix) << req.model.name;
    Plan fewer = best;
    fewer.checkpoint_layers.assign(order.begin(), order.begin() + static_cast<long>(k - 1));
    std::sort(fewer.checkpoint_layers.begin(), fewer.checkpoint_layers.end());
    EXPECT_FALSE(EvaluatePlan(fewer, s.profile).fits) << req.model.name << ": " << k - 1 << " blocks fit too";
  }
}

TEST(PlanSearchTest, LongerLossChunksAreTriedOnTheBestPlanAndKeptWhereTheyPay) {
  // Llama-3.2-1B on one H200 at 16,384 tokens per micro-batch: its head's
  // GEMMs run faster in longer chunks (measured: +0.6% at 4,096
  // tokens) and memory is plentiful, so the chosen plan's chunk is longer,
  // and faster than the same plan at the default chunk.
  SearchRequest req = Request("llama3.2-1b", "h200-sxm", 1, 4096, 4);
  req.micro_batch = 4;
  Searched s = Search(req);
  ASSERT_TRUE(s.result.found) << s.result.why_none;
  const Plan& best = s.result.best.plan;
  EXPECT_GT(best.loss_chunk_tokens, kDefaultLossChunkTokens);
  Plan shorter = best;
  shorter.loss_chunk_tokens = kDefaultLossChunkTokens;
  EXPECT_LT(EvaluatePlan(shorter, s.profile).time.step_seconds, s.result.best.time.step_seconds * 1.02);
  EXPECT_GT(EvaluatePlan(shorter, s.profile).time.step_seconds, s.result.best.time.step_seconds);
  // Pinned, the chunk is the user's.
  req.loss_chunk_tokens = kDefaultLossChunkTokens;
  EXPECT_EQ(Search(req).result.best.plan.loss_chunk_tokens, kDefaultLossChunkTokens);
  // A micro-batch of fewer tokens than the default chunk is one chunk already: nothing to try.
  SearchRequest small = Request("tiny-llama", "cpu", 1, 256, 2);
  small.micro_batch = 2;
  EXPECT_EQ(Search(small).result.best.plan.loss_chunk_tokens, kDefaultLossChunkTokens);
}

TEST(PlanSearchTest, PinsThatExcludeEveryPlanSaySo) {
  // hybrid_shard on 2 GPUs has no shard group strictly between 1 and 2. There
  // is no global batch, so the message must not blame one.
  auto r = Request("tiny-llama", "cpu", 2, 128, 0);
  r.strategy = ShardingStrategy::kHybridShard;
  Searched s = Search(r);
  EXPECT_FALSE(s.result.found);
  EXPECT_NE(s.result.why_none.find("hybrid_shard"), std::string::npos) << s.result.why_none;
  EXPECT_EQ(s.result.why_none.find("global batch"), std::string::npos) << s.result.why_none;
}

TEST(PlanSearchTest, HostMemoryPerNodeIsSharedByTheJobsGpusOnTheNode) {
  // Llama-3-8B on one H200 with the optimizer offloaded pins 12 B/param
  // (master 4, AdamW 8) and its gradient and bf16 staging: per unit, 6
  // B/param more (18 x N = 134.6 GiB), or two slots of the head's shard
  // (fp32 down, bf16 up: 12 x 525,340,672 B; 95.6 GiB in all). The search
  // stages per unit where the host has room: the slots within the
  // profile's 128 GiB per GPU, nothing within a 64 GiB node, per unit
  // within a 240 GiB one.
  auto req = Request("llama3-8b", "h200-sxm", 1, 4096, 4);
  req.strategy = ShardingStrategy::kNoShard;
  req.offload = Offload::kOptimizer;
  req.checkpoint_layers = std::vector<int>{};
  req.micro_batch = 1;
  const double pinned = 12.0 * 8'030'261'248 + 12.0 * 525'340'672;
  const double per_unit = 18.0 * 8'030'261'248;
  Searched by_profile = Search(req);
  ASSERT_TRUE(by_profile.result.found) << by_profile.result.why_none;
  EXPECT_DOUBLE_EQ(by_profile.result.best.memory.host_capacity_bytes, by_profile.profile.host_memory_bytes);
  EXPECT_NEAR(by_profile.result.best.memory.host_bytes, pinned, 1e6);
  EXPECT_EQ(by_profile.result.best.plan.offload_staging, OffloadStaging::kSlots);

  req.host_memory_per_node_bytes = 64.0 * (1 << 30);
  Searched small_node = Search(req);
  EXPECT_FALSE(small_node.result.found);
  EXPECT_NE(small_node.result.why_none.find("host memory"), std::string::npos) << small_node.result.why_none;

  req.host_memory_per_node_bytes = 240.0 * (1 << 30);
  Searched whole_node = Search(req);
  ASSERT_TRUE(whole_node.result.found) << whole_node.result.why_none;
  EXPECT_DOUBLE_EQ(whole_node.result.best.memory.host_capacity_bytes, 240.0 * (1 << 30));
  EXPECT_NEAR(whole_node.result.best.memory.host_bytes, per_unit, 1e6);
  EXPECT_EQ(whole_node.result.best.plan.offload_staging, OffloadStaging::kUnit);
  EXPECT_EQ(whole_node.result.best.plan.host_memory_per_node_bytes, 240.0 * (1 << 30));  // recorded in the plan
  ExpectEqualsEvaluatePlan(whole_node);

  // Two GPUs of the job on that node share it.
  Plan two = whole_node.result.best.plan;
  two.gpus = 2;
  two.gpus_per_node = 8;
  EXPECT_DOUBLE_EQ(HostCapacityPerGpu(two, whole_node.profile), 120.0 * (1 << 30));
  two.gpus = 16;  // 8 per node
  EXPECT_DOUBLE_EQ(HostCapacityPerGpu(two, whole_node.profile), 30.0 * (1 << 30));
}

TEST(PlanSearchTest, ParameterOffloadIsSearchedWhereItCanPay) {
  // Streaming parameters through the host only adds copies to a step: where
  // a plan runs without recompute it cannot win, and it is not searched.
  Searched roomy = Search(Request("llama3.2-1b", "h100-sxm-80g", 8, 4096, 64));
  ASSERT_TRUE(roomy.result.found);
  ASSERT_TRUE(roomy.result.best.plan.checkpoint_layers.empty());
  EXPECT_FALSE(OffloadsParams(roomy.result.best.plan.offload));
  for (const auto& alt : roomy.result.alternatives) EXPECT_FALSE(OffloadsParams(alt.estimate.plan.offload));
  // Where plans recompute blocks (Llama-3-8B on one H200), the memory it frees
  // can buy recompute back: it is searched and ranked by speed like the rest.
  auto one_gpu = Request("llama3-8b", "h200-sxm", 1, 4096, 4);
  one_gpu.host_memory_per_node_bytes = 240.0 * (1 << 30);
  Searched tight = Search(one_gpu);
  ASSERT_TRUE(tight.result.found);
  bool searched = OffloadsParams(tight.result.best.plan.offload);
  for (const auto& alt : tight.result.alternatives) {
    searched |= OffloadsParams(alt.estimate.plan.offload);
    if (alt.estimate.fits)
      EXPECT_GE(tight.result.best.tokens_per_second_per_gpu, alt.estimate.tokens_per_second_per_gpu);
  }
  EXPECT_TRUE(searched);
  // Pinned, it is planned (for a what-if).
  auto pinned = one_gpu;
  pinned.offload = Offload::kOptimizerAndParams;
  EXPECT_EQ(Search(pinned).result.best.plan.offload, Offload::kOptimizerAndParams);
}

TEST(PlanSearchTest, ReplicatedEdgesAreSearchedAndChosenWhereTheyPay) {
  // Llama-3.2-1B on 64 H100 with 8 micro-batches per step: sharded, the
  // embedding and head (half the model's parameters, 128k x 2048 each) are
  // gathered and reduce-scattered on every micro-batch across nodes; kept
  // whole, their gradients cross the network once per step.
  auto req = Request("llama3.2-1b", "h100-sxm-80g", 64, 4096, 4096);
  req.strategy = ShardingStrategy::kFullShard;
  req.micro_batch = 8;
  Searched s = Search(req);
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  const Plan& best = s.result.best.plan;
  EXPECT_TRUE(best.replicate_edges);
  Plan sharded = best;
  sharded.replicate_edges = false;
  EXPECT_GT(s.result.best.tokens_per_second_per_gpu, EvaluatePlan(sharded, s.profile).tokens_per_second_per_gpu);
  // Pinned off, never chosen; pinned on, every plan has it.
  req.replicate_edges = false;
  Searched off = Search(req);
  EXPECT_FALSE(off.result.best.plan.replicate_edges);
  for (const auto& alt : off.result.alternatives) EXPECT_FALSE(alt.estimate.plan.replicate_edges);
  req = Request("llama3.2-1b", "h100-sxm-80g", 8, 4096, 64);
  req.replicate_edges = true;
  Searched on = Search(req);
  ASSERT_TRUE(on.result.found);
  EXPECT_TRUE(on.result.best.plan.replicate_edges);
  EXPECT_NE(on.result.best.plan.strategy, ShardingStrategy::kNoShard);
  for (const auto& alt : on.result.alternatives) EXPECT_TRUE(alt.estimate.plan.replicate_edges);
}

TEST(PlanSearchTest, CastAtGatherIsChosenWhereItBuysBackRecompute) {
  // Llama-3-8B on two H200s without offload, 4 sequences per micro-batch:
  // the bf16 copy of each shard (7.5 GiB) costs blocks that must be
  // checkpointed. Casting at each gather instead takes a cast on the
  // gather's stream and recomputes fewer.
  auto req = Request("llama3-8b", "h200-sxm", 2, 4096, 16);
  req.strategy = ShardingStrategy::kFullShard;
  req.offload = Offload::kNone;
  req.micro_batch = 4;
  Searched s = Search(req);
  ExpectAllFeasibleFit(s);
  ExpectEqualsEvaluatePlan(s);
  const Estimate& best = s.result.best;
  EXPECT_TRUE(best.plan.cast_at_gather);
  req.cast_at_gather = false;
  Searched kept = Search(req);
  ASSERT_TRUE(kept.result.found);
  EXPECT_FALSE(kept.result.best.plan.cast_at_gather);
  for (const auto& alt : kept.result.alternatives) EXPECT_FALSE(alt.estimate.plan.cast_at_gather);
  EXPECT_GT(kept.result.best.plan.checkpoint_layers.size(), best.plan.checkpoint_layers.size());
  EXPECT_GT(best.tokens_per_second_per_gpu, kept.result.best.tokens_per_second_per_gpu);
  // On two 80 GB H100s the kept shards leave no room at all, even with
  // every block checkpointed: casting at each gather is what fits.
  auto h100 = Request("llama3-8b", "h100-sxm-80g", 2, 4096, 8);
  h100.strategy = ShardingStrategy::kFullShard;
  h100.offload = Offload::kNone;
  h100.cast_at_gather = false;
  EXPECT_FALSE(Search(h100).result.found);
  h100.cast_at_gather.reset();
  Searched fits = Search(h100);
  ASSERT_TRUE(fits.result.found) << fits.result.why_none;
  EXPECT_TRUE(fits.result.best.plan.cast_at_gather);
  // A plan that fits with nothing recomputed keeps its bf16 shards (the
  // search does not spend evaluations on a cast that cannot buy anything).
  auto small = Request("llama3.2-1b", "h100-sxm-80g", 2, 2048, 8);
  small.strategy = ShardingStrategy::kFullShard;
  small.offload = Offload::kNone;
  Searched roomy = Search(small);
  ASSERT_TRUE(roomy.result.found);
  EXPECT_TRUE(roomy.result.best.plan.checkpoint_layers.empty());
  EXPECT_FALSE(roomy.result.best.plan.cast_at_gather);
}

}  // namespace
}  // namespace llmplan
