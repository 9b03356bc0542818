#include "planner/plan.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/json_read.h"
#include "base/user_error.h"

namespace llmplan {

std::string StrategyName(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "full_shard";
    case ShardingStrategy::kShardGradOp: return "shard_grad_op";
    case ShardingStrategy::kNoShard: return "no_shard";
    case ShardingStrategy::kHybridShard: return "hybrid_shard";
  }
  return "?";
}

ShardingStrategy ParseStrategy(const std::string& name) {
  for (auto s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard,
                 ShardingStrategy::kHybridShard})
    if (StrategyName(s) == name) return s;
  throw UserError("unknown strategy '" + name + "': use full_shard, shard_grad_op, no_shard or hybrid_shard");
}

std::string OffloadName(Offload o) {
  switch (o) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kParams: return "params";
    case Offload::kOptimizerAndParams: return "optimizer+params";
  }
  return "?";
}

Offload ParseOffload(const std::string& name) {
  for (auto o : {Offload::kNone, Offload::kOptimizer, Offload::kParams, Offload::kOptimizerAndParams})
    if (OffloadName(o) == name) return o;
  if (name == "params+optimizer") return Offload::kOptimizerAndParams;
  throw UserError("unknown offload '" + name + "': use none, optimizer, params or optimizer+params");
}

bool OffloadsOptimizer(Offload o) { return o == Offload::kOptimizer || o == Offload::kOptimizerAndParams; }
bool OffloadsParams(Offload o) { return o == Offload::kParams || o == Offload::kOptimizerAndParams; }

std::string OffloadTierName(OffloadTier t) { return t == OffloadTier::kNvme ? "nvme" : "host"; }

OffloadTier ParseOffloadTier(const std::string& name) {
  if (name == "host") return OffloadTier::kHost;
  if (name == "nvme") return OffloadTier::kNvme;
  throw UserError("unknown offload destination '" + name + "': use host or nvme");
}

std::string AttentionSpanName(AttentionSpan a) { return a == AttentionSpan::kDocuments ? "documents" : "window"; }

AttentionSpan ParseAttentionSpan(const std::string& name) {
  if (name == "window") return AttentionSpan::kWindow;
  if (name == "documents") return AttentionSpan::kDocuments;
  throw UserError("unknown attention '" + name + "' (use window or documents)");
}

std::string OffloadStagingName(OffloadStaging s) { return s == OffloadStaging::kUnit ? "unit" : "slots"; }

OffloadStaging ParseOffloadStaging(const std::string& name) {
  if (name == "unit") return OffloadStaging::kUnit;
  if (name == "slots") return OffloadStaging::kSlots;
  throw UserError("unknown offload staging '" + name + "': use unit or slots");
}

std::string DTypeName(DType d) { return d == DType::kBF16 ? "bf16" : "fp32"; }
DType ParseDType(const std::string& name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp32") return DType::kFP32;
  throw UserError("unknown dtype '" + name + "': use bf16 or fp32");
}
int DTypeBytes(DType d) { return d == DType::kBF16 ? 2 : 4; }

bool Plan::IsCheckpointed(int layer) const {
  return std::binary_search(checkpoint_layers.begin(), checkpoint_layers.end(), layer);
}

int Plan::UnitShardGroup(int unit) const {
  const bool edge = unit == 0 || unit == model.layers + 1;
  return replicate_edges && edge ? 1 : shard_group_size;
}

void NormaliseGrouping(Plan& plan) {
  switch (plan.strategy) {
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kShardGradOp: plan.shard_group_size = plan.gpus; break;
    case ShardingStrategy::kNoShard: plan.shard_group_size = 1; break;
    case ShardingStrategy::kHybridShard:
      if (plan.shard_group_size <= 0) plan.shard_group_size = std::min(plan.gpus, plan.gpus_per_node);
      break;
  }
}

int64_t MaxGradAccum(const ModelSpec& model) {
  constexpr int64_t kMaxUnitPassesPerStep = int64_t{1} << 18;
  return std::clamp<int64_t>(kMaxUnitPassesPerStep / std::max<int64_t>(model.layers + 2, 1), 1, 65536);
}

void Plan::Validate() const {
  model.Validate();
  auto fail = [](const std::string& m) { throw UserError("plan: " + m); };
  if (gpus < 1 || gpus > (1 << 20)) fail("gpus must be between 1 and 1048576");
  if (gpus_per_node < 1) fail("gpus_per_node must be at least 1");
  if (!(host_memory_per_node_bytes >= 0)) fail("host_memory_per_node_bytes must be 0 (the profile's) or positive");
  if (shard_group_size < 1 || gpus % shard_group_size != 0)
    fail("shard_group_size (" + std::to_string(shard_group_size) + ") must divide gpus (" + std::to_string(gpus) + ")");
  if (strategy == ShardingStrategy::kHybridShard && (shard_group_size == 1 || shard_group_size == gpus) && gpus > 1)
    fail("hybrid_shard needs 1 < shard_group_size < gpus; use full_shard or no_shard otherwise");
  if (offload == Offload::kOptimizerAndParams && strategy == ShardingStrategy::kNoShard)
    fail("offload optimizer+params streams each unit's parameters in before its gather, and no_shard has no "
         "gathers: use full_shard (on one GPU too), or offload optimizer");
  if (replicate_edges && (strategy == ShardingStrategy::kNoShard || shard_group_size == 1))
    fail("replicate_edges keeps the embedding and head whole while the blocks are sharded, and this plan shards "
         "nothing (no_shard, or shard groups of one GPU): drop replicate_edges");
  if (replicate_edges && offload == Offload::kOptimizerAndParams)
    fail("replicate_edges keeps the embedding and head on every GPU, and offload optimizer+params streams "
         "parameters in through gathers: offload optimizer or params instead, or drop replicate_edges");
  if (offload_to == OffloadTier::kNvme && !OffloadsOptimizer(offload))
    fail("offload_to nvme holds AdamW's state on a local SSD, and offload " + OffloadName(offload) +
         " keeps the optimizer on the GPU: use offload optimizer or optimizer+params");
  if (delayed_update && offload != Offload::kOptimizer)
    fail("delayed_update runs the CPU AdamW of the offloaded optimizer beside the next step, and offload " +
         OffloadName(offload) + (offload == Offload::kOptimizerAndParams
                                     ? " streams parameters from the host shard that update writes"
                                     : " keeps the optimizer on the GPU") +
         ": use offload optimizer, or drop delayed_update");
  if (delayed_update && offload_to == OffloadTier::kNvme)
    fail("delayed_update is not supported with offload_to nvme yet: use offload_to host, or drop delayed_update");
  if (delayed_update && grad_accum != 1)
    fail("delayed_update needs one micro-batch per step (grad_accum " + std::to_string(grad_accum) +
         " here): the delayed update moves each unit's gradient and parameters through two staging slots between "
         "its first reduction and its last backward; raise micro_batch to grad_accum 1, or drop delayed_update");
  if (delayed_update && offload_staging == OffloadStaging::kUnit)
    fail("offload_staging unit does not go with delayed_update, whose gradients and parameters move through the "
         "staging slots: use offload_staging slots, or drop delayed_update");
  if (cast_at_gather && (offload != Offload::kNone || shard_group_size == 1 || strategy == ShardingStrategy::kNoShard))
    fail("cast_at_gather casts the fp32 master shard for each all-gather, and this plan " +
         std::string(offload != Offload::kNone ? "offloads (the update comes back as the compute-dtype shard)"
                                               : "has no all-gathers (no_shard, or shard groups of one GPU)") +
         ": drop cast_at_gather");
  if (cuda_graph) {
    std::string why;
    if (gpus != 1) why = "runs on " + std::to_string(gpus) + " GPUs (collectives are not captured)";
    else if (offload != Offload::kNone) why = "offloads (its copies and the host's AdamW are not captured)";
    else if (attention == AttentionSpan::kDocuments) why = "keeps attention inside documents, whose layout changes every batch";
    else if (trained_fraction < 1) why = "trains under a loss mask, whose trained rows change every batch";
    if (!why.empty())
      fail("cuda_graph replays one captured step of fixed shapes on one GPU, and this plan " + why +
           ": drop cuda_graph (estimate --cuda-graph no)");
  }
  if (seq_len < 1 || seq_len > (int64_t{1} << 22)) fail("seq_len must be between 1 and 4194304");
  // Positions past the model's maximum were never trained: the model's own
  // code (and Hugging Face's) is not meant to run there.
  if (seq_len > model.max_seq)
    fail("seq_len " + std::to_string(seq_len) + " is above " + model.name + "'s max_position_embeddings (" +
         std::to_string(model.max_seq) + "); plan again with a sequence length of " + std::to_string(model.max_seq) +
         " or less, or raise max_position_embeddings in the model's config.json");
  if (micro_batch < 1 || micro_batch > 65536) fail("micro_batch must be between 1 and 65536");
  if (grad_accum < 1 || grad_accum > 65536) fail("grad_accum must be between 1 and 65536");
  if (grad_accum > MaxGradAccum(model))
    fail("grad_accum " + std::to_string(grad_accum) + " is over " + std::to_string(MaxGradAccum(model)) +
         ", the most micro-batches a step of " + model.name + " may hold (each one is simulated); raise micro_batch "
         "and lower grad_accum");
  // Each factor is bounded, their product is not: keep TokensPerStep() in int64.
  if (static_cast<double>(GlobalBatch()) * static_cast<double>(seq_len) > 9007199254740992.0)  // 2^53
    fail("micro_batch x grad_accum x gpus x seq_len is over 2^53 tokens per step");
  if (prefetch_depth < 0 || prefetch_depth > 8) fail("prefetch_depth must be between 0 and 8");
  if (loss_chunk_tokens < 1) fail("loss_chunk_tokens must be positive");
  if (!(trained_fraction > 0 && trained_fraction <= 1))
    fail("trained_fraction must be above 0 and at most 1: the share of targets the loss trains");
  if (!(document_attention_work > 0 && document_attention_work <= static_cast<double>(seq_len)))
    fail("document_attention_work must be above 0 and at most seq_len: the documents' attention work over a whole "
         "window's");
  for (size_t i = 0; i < checkpoint_layers.size(); ++i) {
    int l = checkpoint_layers[i];
    if (l < 0 || l >= model.layers)
      fail("checkpoint layer " + std::to_string(l) + " is outside 0.." + std::to_string(model.layers - 1));
    if (i > 0 && checkpoint_layers[i - 1] >= l) fail("checkpoint_layers must be sorted and distinct");
  }
  const auto& o = optimizer;
  if (!(o.lr >= 0 && o.lr < 10)) fail("optimizer.lr must be in [0, 10)");
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) fail("optimizer betas must be in [0, 1)");
  if (!(o.eps > 0)) fail("optimizer.eps must be positive");
  if (!(o.weight_decay >= 0)) fail("optimizer.weight_decay must be non-negative");
  if (!(o.grad_clip >= 0)) fail("optimizer.grad_clip must be non-negative (0 disables)");
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) fail("optimizer.min_lr_ratio must be in [0, 1]");
  if (o.warmup_steps < 0 || o.decay_steps < 0) fail("optimizer warmup/decay steps must be non-negative");
}

std::vector<int> ParseLayerList(const std::string& text, int64_t layers) {
  std::vector<int> out;
  if (text == "none" || text.empty()) return out;
  if (text == "all") {
    for (int i = 0; i < layers; ++i) out.push_back(i);
    return out;
  }
  std::set<int> chosen;
  std::stringstream ss(text);
  std::string item;
  auto parse_int = [&](const std::string& s) -> int {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      throw UserError("checkpoint layers: '" + text + "' is not 'none', 'all' or a list like 0,3-5");
    return std::stoi(s);
  };
  while (std::getline(ss, item, ',')) {
    auto dash = item.find('-');
    int lo, hi;
    if (dash == std::string::npos) {
      lo = hi = parse_int(item);
    } else {
      lo = parse_int(item.substr(0, dash));
      hi = parse_int(item.substr(dash + 1));
    }
    if (lo > hi) throw UserError("checkpoint layers: range " + item + " runs backwards");
    if (hi >= layers)
      throw UserError("checkpoint layers: layer " + std::to_string(hi) + " does not exist; the model has layers 0.." +
                      std::to_string(layers - 1));
    for (int i = lo; i <= hi; ++i) chosen.insert(i);
  }
  return {chosen.begin(), chosen.end()};
}

std::string FormatLayerList(const std::vector<int>& layers) {
  if (layers.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(layers[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(layers[j]);
    }
    i = j + 1;
  }
  return out;
}

std::string PlanSummary(const Plan& p) {
  std::string s = StrategyName(p.strategy);
  if (p.strategy == ShardingStrategy::kHybridShard) s += "(" + std::to_string(p.shard_group_size) + ")";
  s += ", mb " + std::to_string(p.micro_batch) + " x ga " + std::to_string(p.grad_accum);
  s += ", ckpt " + std::to_string(p.checkpoint_layers.size()) + "/" + std::to_string(p.model.layers);
  s += ", offload " + OffloadName(p.offload);
  if (p.OptimizerStateOnNvme()) s += " to nvme";
  if (p.delayed_update) s += ", delayed update";
  if (p.StagesEveryUnit()) s += ", staged per unit";
  if (p.replicate_edges) s += ", edges whole";
  if (p.cast_at_gather) s += ", cast at gather";
  if (!p.fused_kernels) s += ", composite kernels";
  if (p.cuda_graph) s += ", CUDA graph";
  if (p.attention == AttentionSpan::kDocuments) s += ", attention in documents";
  return s;
}

nlohmann::json PlanToJson(const Plan& p) {
  const auto& o = p.optimizer;
  nlohmann::json j = {{"format", "llmplan-plan-1"},
                      {"model", ModelSpecToJson(p.model)},
                      {"profile", p.profile},
                      {"gpus", p.gpus},
                      {"gpus_per_node", p.gpus_per_node},
                      {"shard_group_size", p.shard_group_size},
                      {"host_memory_per_node_bytes", p.host_memory_per_node_bytes},
                      {"seq_len", p.seq_len},
                      {"micro_batch", p.micro_batch},
                      {"grad_accum", p.grad_accum},
                      {"global_batch", p.GlobalBatch()},
                      {"strategy", StrategyName(p.strategy)},
                      {"offload", OffloadName(p.offload)},
                      {"replicate_edges", p.replicate_edges},
                      {"offload_to", OffloadTierName(p.offload_to)},
                      {"delayed_update", p.delayed_update},
                      {"checkpoint_layers", p.checkpoint_layers},
                      {"prefetch_depth", p.prefetch_depth},
                      {"fused_kernels", p.fused_kernels},
                      {"loss_chunk_tokens", p.loss_chunk_tokens},
                      {"param_dtype", DTypeName(p.param_dtype)},
                      {"reduce_dtype", DTypeName(p.reduce_dtype)},
                      {"seed", p.seed},
                      {"optimizer",
                       {{"lr", o.lr},
                        {"min_lr_ratio", o.min_lr_ratio},
                        {"warmup_steps", o.warmup_steps},
                        {"decay_steps", o.decay_steps},
                        {"beta1", o.beta1},
                        {"beta2", o.beta2},
                        {"eps", o.eps},
                        {"weight_decay", o.weight_decay},
                        {"grad_clip", o.grad_clip}}}};
  // Only where it means something: a plan without an offloaded optimizer
  // stages nothing on the host.
  if (OffloadsOptimizer(p.offload)) j["offload_staging"] = OffloadStagingName(p.offload_staging);
  if (p.cast_at_gather) j["cast_at_gather"] = true;  // absent in every plan file before it
  if (p.cuda_graph) j["cuda_graph"] = true;          // likewise
  if (p.attention == AttentionSpan::kDocuments) {  // absent: "window", as every plan file before it
    j["attention"] = AttentionSpanName(p.attention);
    j["document_attention_work"] = p.document_attention_work;
  }
  if (p.trained_fraction < 1) j["trained_fraction"] = p.trained_fraction;  // absent: every target, as before it
  return j;
}

Plan PlanFromJson(const nlohmann::json& input, const std::string& context) {
  // Accept the output of `llmplan estimate --json` too: its plan is under "plan".
  const nlohmann::json& j = (input.is_object() && input.contains("plan") && input["plan"].is_object() &&
                             input["plan"].contains("model"))
                                ? input["plan"]
                                : input;
  JsonObject r(j, context);
  Plan p;
  p.model = ModelSpecFromHfConfig(r.Raw("model"), JsonObject(r.Raw("model"), context + ": model").String("name", "model"));
  p.profile = r.String("profile");
  p.gpus = static_cast<int>(r.Integer("gpus", 1, 1 << 20));
  p.gpus_per_node = static_cast<int>(r.Integer("gpus_per_node", 1, 1024, 8));
  p.shard_group_size = static_cast<int>(r.Integer("shard_group_size", 1, 1 << 20, 0));
  p.host_memory_per_node_bytes = r.NumberIn("host_memory_per_node_bytes", 0, 1e18, 0);
  p.seq_len = r.Integer("seq_len", 1, int64_t{1} << 22);
  p.micro_batch = r.Integer("micro_batch", 1, 65536);
  p.grad_accum = r.Integer("grad_accum", 1, 65536, 1);
  p.strategy = ParseStrategy(r.String("strategy", "full_shard"));
  p.offload = ParseOffload(r.String("offload", "none"));
  p.replicate_edges = r.Bool("replicate_edges", false);
  p.offload_to = ParseOffloadTier(r.String("offload_to", "host"));
  p.delayed_update = r.Bool("delayed_update", false);
  p.offload_staging = ParseOffloadStaging(r.String("offload_staging", "slots"));
  p.cast_at_gather = r.Bool("cast_at_gather", false);
  p.cuda_graph = r.Bool("cuda_graph", false);
  if (r.Has("checkpoint_layers")) {
    const auto& cl = r.Raw("checkpoint_layers");
    if (cl.is_string()) {
      p.checkpoint_layers = ParseLayerList(cl.get<std::string>(), p.model.layers);
    } else if (cl.is_array()) {
      std::set<int> s;
      for (const auto& v : cl) {
        if (!v.is_number_integer()) r.Fail("checkpoint_layers", "must hold whole layer indices");
        int64_t l = v.get<int64_t>();
        if (l < 0 || l >= p.model.layers) r.Fail("checkpoint_layers", "holds layer " + std::to_string(l) + " which the model lacks");
        s.insert(static_cast<int>(l));
      }
      p.checkpoint_layers.assign(s.begin(), s.end());
    } else {
      r.Fail("checkpoint_layers", "must be a list of layer indices, \"all\" or \"none\"");
    }
  }
  p.prefetch_depth = static_cast<int>(r.Integer("prefetch_depth", 0, 8, 1));
  p.fused_kernels = r.Bool("fused_kernels", true);
  p.loss_chunk_tokens = r.Integer("loss_chunk_tokens", 1, int64_t{1} << 30, kDefaultLossChunkTokens);
  p.attention = ParseAttentionSpan(r.String("attention", "window"));
  p.document_attention_work = r.NumberIn("document_attention_work", 1e-9, 1e9, 1.0);
  p.trained_fraction = r.NumberIn("trained_fraction", 1e-12, 1.0, 1.0);
  p.param_dtype = ParseDType(r.String("param_dtype", "bf16"));
  p.reduce_dtype = ParseDType(r.String("reduce_dtype", "fp32"));
  p.seed = static_cast<uint64_t>(r.Integer("seed", 0, int64_t{1} << 53, 1234));
  // A plan trains with the optimizer it records: one without is not quietly
  // given defaults (llmplan estimate -o always writes one).
  if (!r.Has("optimizer"))
    r.Fail("optimizer", "is missing (the learning rate, betas and schedule the run trains with): write the plan "
                        "with llmplan estimate -o, or add an \"optimizer\" object");
  {
    JsonObject o = r.Object("optimizer");
    auto& c = p.optimizer;
    c.lr = o.NumberIn("lr", 0, 10, c.lr);
    c.min_lr_ratio = o.NumberIn("min_lr_ratio", 0, 1, c.min_lr_ratio);
    c.warmup_steps = o.Integer("warmup_steps", 0, int64_t{1} << 40, c.warmup_steps);
    c.decay_steps = o.Integer("decay_steps", 0, int64_t{1} << 40, c.decay_steps);
    c.beta1 = o.NumberIn("beta1", 0, 0.999999, c.beta1);
    c.beta2 = o.NumberIn("beta2", 0, 0.999999, c.beta2);
    c.eps = o.NumberIn("eps", 1e-30, 1, c.eps);
    c.weight_decay = o.NumberIn("weight_decay", 0, 10, c.weight_decay);
    c.grad_clip = o.NumberIn("grad_clip", 0, 1e9, c.grad_clip);
  }
  if (p.shard_group_size == 0) NormaliseGrouping(p);
  p.Validate();
  // global_batch is derived (micro_batch x grad_accum x data-parallel ranks);
  // a plan that states another one was edited by hand in one place only.
  if (r.Has("global_batch")) {
    const int64_t stated = r.Integer("global_batch", 1, int64_t{1} << 62);
    if (stated != p.GlobalBatch())
      r.Fail("global_batch", std::to_string(stated) + " disagrees with micro_batch x grad_accum x gpus = " +
                                 std::to_string(p.micro_batch) + " x " + std::to_string(p.grad_accum) + " x " +
                                 std::to_string(p.gpus) + " = " + std::to_string(p.GlobalBatch()) +
                                 ": make the plan again with llmplan estimate, or correct one of them");
  }
  return p;
}

Plan LoadPlan(const std::string& path) { return PlanFromJson(ReadJsonFile(path, "plan"), "plan " + path); }

void SavePlan(const Plan& plan, const std::string& path) {
  WriteFileAtomically(path, PlanToJson(plan).dump(2) + "\n", "plan");
}

}  // namespace llmplan
