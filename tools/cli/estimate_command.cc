// llmplan estimate: the planner. Answers "will it fit, how, how fast, at what
// cost" for a model on a number of GPUs, and writes the chosen plan.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <chrono>
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "data/document_index.h"
#include "data/document_pieces.h"
#include "data/loss_mask.h"
#include "data/token_file.h"
#include "feedback/calibration_store.h"
#include "planner/nvme_offload.h"
#include "planner/plan_search.h"
#include "base/user_error.h"
#include "simulator/evaluate.h"
#include "tools/cli/commands.h"
#include "tools/cli/option_checks.h"
#include "tools/cli/report.h"
#include "tools/cli/version.h"

namespace llmplan::cli {

namespace {

struct EstimateOptions {
  std::string model;
  std::string gpus = "8";
  std::string gpu = "h100-sxm-80g";
  int64_t global_batch = 0;
  double global_batch_tokens = 0;
  std::string strategy, checkpoint_layers, offload, offload_to, offload_staging, replicate_edges, cast_at_gather, cuda_graph;
  std::string kernels = "fused";
  std::string attention = "window";
  // The token file to train on: its documents price attention (--attention
  // documents) and its loss mask, where it has one, the head.
  std::string data;
  static constexpr int64_t kUnpinned = std::numeric_limits<int64_t>::min();  // no value a user can type
  int64_t micro_batch = kUnpinned, grad_accum = kUnpinned, shard_group = kUnpinned;
  int64_t seq = kUnpinned;  // 4096, or the model's max_position_embeddings when smaller
  int gpus_per_node = 0, max_gpus = 16384, prefetch = 1;
  double train_tokens = 0, target_days = 0;
  double host_memory_gib = 0;
  double lr = -1;
  int64_t warmup = -1, decay = -1, loss_chunk = kUnpinned;
  bool ckpt_async = false;  // the run will pass --ckpt-async: count its host staging
  bool delayed_update = false;
  bool json = false;
  bool no_calibration = false;  // predict with the profile as shipped, not refitted on this machine's runs
  std::string out;
};

int ParseGpus(const std::string& text) {
  if (text == "auto") return 0;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw UserError("--gpus must be a positive whole number or 'auto' (got '" + text + "')");
  if (text.find_first_not_of('0') != std::string::npos && text.size() - text.find_first_not_of('0') > 7)
    throw UserError("--gpus " + text + " is more GPUs than llmplan plans for (at most 1048576)");
  int g = std::stoi(text);
  if (g < 1) throw UserError("--gpus must be at least 1 (or 'auto')");
  return g;
}

// One line on what the prediction was made with, e.g. "calibrated on 7 runs
// on this machine; held-out step error 1.9%".
std::string CalibrationLine(const StoreFit& c, const std::string& off_by) {
  if (!off_by.empty()) return "calibration: off (" + off_by + "): the profile as shipped";
  if (!c.profile) return "calibration: none (the profile as shipped; runs on this machine refit it as they finish)";
  char text[200];
  if (std::isfinite(c.held_out_error))
    std::snprintf(text, sizeof text, "calibrated on %zu runs on this machine; held-out step error %.1f%% "
                  "(--no-calibration: the shipped profile)", c.used.size(), 100 * c.held_out_error);
  else
    std::snprintf(text, sizeof text, "calibrated on %zu run on this machine; no held-out error from one run "
                  "(--no-calibration: the shipped profile)", c.used.size());
  return text;
}

nlohmann::json CalibrationJson(const StoreFit& c) {
  if (!c.profile) return {{"calibrated", false}, {"notes", c.notes}};
  return {{"calibrated", true},
          {"runs", c.used.size()},
          {"outliers", c.outliers.size()},
          {"held_out_step_error", std::isfinite(c.held_out_error) ? nlohmann::json(c.held_out_error) : nlohmann::json()},
          {"spread", std::isfinite(c.spread) ? nlohmann::json(c.spread) : nlohmann::json()},
          {"notes", c.notes}};
}

void Run(const EstimateOptions& o) {
  auto started = std::chrono::steady_clock::now();
  SearchRequest req;
  req.model = LoadModelSpec(o.model);
  HardwareProfile profile = LoadHardwareProfile(o.gpu);
  req.profile = o.gpu;  // the plan names the shipped profile: a run rebuilds its program from it
  // The runs this machine recorded (feedback/calibration_store.h) refit the
  // profile, unless asked not to.
  StoreFit calibration;
  const std::optional<std::string> store = CalibrationStoreDir();
  const std::string calibration_off_by =
      o.no_calibration ? "--no-calibration" : (store ? "" : "LLMPLAN_CALIBRATION_DIR=off, or no home directory");
  if (calibration_off_by.empty()) {
    try {
      calibration = FitStore(*store, profile, ThisMachine(ThisBuild()));
    } catch (const UserError& e) {
      calibration.notes.push_back(std::string("the calibration store cannot be read: ") + e.what());
    }
    for (const std::string& note : calibration.notes) std::cerr << "llmplan: note: " << note << "\n";
    if (calibration.profile) profile = *calibration.profile;
  }
  req.gpus = ParseGpus(o.gpus);
  if (o.max_gpus < 1 || o.max_gpus > (1 << 20)) throw UserError("--max-gpus must be between 1 and 1048576");
  req.max_gpus = o.max_gpus;
  if (o.gpus_per_node < 0 || o.gpus_per_node > 1024) throw UserError("--gpus-per-node must be between 1 and 1024");
  req.gpus_per_node = o.gpus_per_node;
  if (o.host_memory_gib < 0 || o.host_memory_gib > 1e6) throw UserError("--host-memory must be between 0 and 1000000 GiB");
  req.host_memory_per_node_bytes = o.host_memory_gib * 1073741824.0;
  const int64_t seq = o.seq != EstimateOptions::kUnpinned ? o.seq : std::min<int64_t>(4096, req.model.max_seq);
  if (seq < 1 || seq > (int64_t{1} << 22)) throw UserError("--seq must be between 1 and 4194304");
  req.seq_len = seq;
  if (o.global_batch < 0 || o.global_batch_tokens < 0) throw UserError("--global-batch must be positive");
  req.global_batch = o.global_batch;
  if (o.global_batch_tokens > 0) {
    if (o.global_batch > 0) throw UserError("give --global-batch or --global-batch-tokens, not both");
    double seqs = o.global_batch_tokens / static_cast<double>(seq);
    if (seqs < 1 || seqs > 9e18 || seqs != static_cast<double>(static_cast<int64_t>(seqs)))
      throw UserError("--global-batch-tokens must be a whole multiple of --seq (" + std::to_string(seq) + ")");
    req.global_batch = static_cast<int64_t>(seqs);
  }
  if (o.train_tokens < 0 || o.target_days < 0) throw UserError("--train-tokens and --target-days must be positive");
  req.train_tokens = o.train_tokens;
  req.target_days = o.target_days;
  if (!o.strategy.empty()) req.strategy = ParseStrategy(o.strategy);
  if (o.shard_group != EstimateOptions::kUnpinned) {
    if (o.shard_group < 1 || o.shard_group > (1 << 20)) throw UserError("--shard-group must be between 1 and 1048576");
    req.shard_group_size = static_cast<int>(o.shard_group);
    if (!req.strategy) req.strategy = ShardingStrategy::kHybridShard;
  }
  if (o.micro_batch != EstimateOptions::kUnpinned) {
    if (o.micro_batch < 1 || o.micro_batch > 65536) throw UserError("--micro-batch must be between 1 and 65536");
    req.micro_batch = o.micro_batch;
  }
  if (o.grad_accum != EstimateOptions::kUnpinned) {
    if (o.grad_accum < 1 || o.grad_accum > 65536) throw UserError("--grad-accum must be between 1 and 65536");
    req.grad_accum = o.grad_accum;
  }
  if (!o.checkpoint_layers.empty()) req.checkpoint_layers = ParseLayerList(o.checkpoint_layers, req.model.layers);
  if (!o.offload.empty()) req.offload = ParseOffload(o.offload);
  if (!o.replicate_edges.empty()) {
    if (o.replicate_edges != "yes" && o.replicate_edges != "no")
      throw UserError("--replicate-edges must be yes or no (got '" + o.replicate_edges + "')");
    req.replicate_edges = o.replicate_edges == "yes";
  }
  if (!o.cast_at_gather.empty()) {
    if (o.cast_at_gather != "yes" && o.cast_at_gather != "no")
      throw UserError("--cast-at-gather must be yes or no (got '" + o.cast_at_gather + "')");
    req.cast_at_gather = o.cast_at_gather == "yes";
    if (*req.cast_at_gather && req.offload && *req.offload != Offload::kNone)
      throw UserError("--cast-at-gather yes casts the fp32 master on the GPU for each all-gather, and --offload " +
                      OffloadName(*req.offload) + " moves it: give --offload none, or drop --cast-at-gather");
  }
  if (!o.cuda_graph.empty()) {
    if (o.cuda_graph != "yes" && o.cuda_graph != "no")
      throw UserError("--cuda-graph must be yes or no (got '" + o.cuda_graph + "')");
    req.cuda_graph = o.cuda_graph == "yes";
  }

  if (!o.offload_to.empty()) {
    req.offload_to = ParseOffloadTier(o.offload_to);
    if (*req.offload_to == OffloadTier::kNvme && req.offload && !OffloadsOptimizer(*req.offload))
      throw UserError("--offload-to nvme holds AdamW's state on the SSD: give --offload optimizer or optimizer+params");
    if (*req.offload_to == OffloadTier::kNvme && !HasNvmeRates(profile))
      throw UserError("profile " + profile.name + " has no NVMe read/write rates: measure them on the machine with "
                      "`llmplan profile --nvme-dir DIR`, then plan with that profile");
  }
  if (o.delayed_update) {
    if (req.offload && *req.offload != Offload::kOptimizer)
      throw UserError("--delayed-update applies the offloaded optimizer's update one step late, and --offload " +
                      OffloadName(*req.offload) + " is not the optimizer offload: give --offload optimizer");
    if (req.offload_to == OffloadTier::kNvme)
      throw UserError("--delayed-update is not supported with --offload-to nvme yet: give --offload-to host");
    if (req.grad_accum && *req.grad_accum != 1)
      throw UserError("--delayed-update needs one micro-batch per step: give --grad-accum 1 (or leave it free)");
    req.delayed_update = true;
  }
  if (!o.offload_staging.empty()) {
    req.offload_staging = ParseOffloadStaging(o.offload_staging);
    if (req.offload && !OffloadsOptimizer(*req.offload))
      throw UserError("--offload-staging places the offloaded optimizer's gradients on the host, and --offload " +
                      OffloadName(*req.offload) + " keeps the optimizer on the GPU: give --offload optimizer or "
                      "optimizer+params");
    if (req.delayed_update && *req.offload_staging == OffloadStaging::kUnit)
      throw UserError("--delayed-update moves gradients and parameters through the staging slots: give "
                      "--offload-staging slots, or drop --delayed-update");
  }
  if (o.kernels != "fused" && o.kernels != "composite")
    throw UserError("--kernels must be fused or composite (got '" + o.kernels + "')");
  req.fused_kernels = o.kernels == "fused";
  req.attention = ParseAttentionSpan(o.attention);
  if (req.attention == AttentionSpan::kDocuments) {
    // Attention inside documents costs what the data's documents make it:
    // their pieces of each window, counted from the file's index.
    if (o.data.empty())
      throw UserError("--attention documents prices attention by the documents' lengths: give --data TOKENFILE "
                      "(prepared by llmplan data prepare, which writes its .docs index)");
    const data::TokenFile file(o.data);
    const std::string index_path = data::DocumentIndexPathFor(o.data);
    if (!std::filesystem::exists(index_path))
      throw UserError("--data " + o.data + " has no document index (" + index_path +
                      "): prepare it with llmplan data prepare");
    const data::DocumentIndex index(index_path, file.size());
    if (index.tokens() <= req.seq_len)
      throw UserError("--data " + o.data + " holds " + std::to_string(index.tokens()) + " tokens, not one window of " +
                      std::to_string(req.seq_len) + " + 1");
    req.document_attention_work = data::CountDocumentPieces(index, req.seq_len).attention_work;
  }
  if (!o.data.empty()) {
    // A loss mask beside the data (data prepare --chat): the head computes
    // the trained targets' rows only.
    const std::string mask = data::LossMaskPathFor(o.data);
    if (const std::optional<double> share = data::TrainedShareOf(o.data)) {
      if (*share == 0)
        throw UserError("--data " + o.data + ": its loss mask " + mask + " trains no token (no assistant turn?): "
                        "there is nothing to learn; prepare the data again");
      req.trained_fraction = *share;
    } else if (req.attention != AttentionSpan::kDocuments) {
      throw UserError("--data is read for --attention documents and for the loss mask beside it (" + mask +
                      ", which data prepare --chat writes): " + o.data + " has no loss mask and --attention is window: "
                      "drop --data, or add --attention documents");
    }
  }
  if (o.prefetch < 0 || o.prefetch > 8) throw UserError("--prefetch must be between 0 and 8");
  req.prefetch_depth = o.prefetch;
  if (o.loss_chunk != EstimateOptions::kUnpinned) {
    if (o.loss_chunk < 1) throw UserError("--loss-chunk must be positive");
    req.loss_chunk_tokens = o.loss_chunk;
  }
  if (o.lr >= 0) req.optimizer.lr = o.lr;
  if (o.warmup >= 0) req.optimizer.warmup_steps = o.warmup;
  if (o.decay >= 0) req.optimizer.decay_steps = o.decay;
  if (req.gpus > 0 && req.shard_group_size && req.gpus % *req.shard_group_size != 0)
    throw UserError("--shard-group " + std::to_string(*req.shard_group_size) + " must divide --gpus " + o.gpus);

  EvaluateOptions evaluate;
  evaluate.ckpt_async = o.ckpt_async;
  SearchResult r = SearchPlans(req, profile, [&](const Plan& p) { return EvaluatePlan(p, profile, evaluate); });
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  // Nothing could even be tried (the pins exclude every plan): no report to show.
  if (!r.found && r.best.plan.model.layers == 0) throw UserError(r.why_none);
  if (req.cast_at_gather.value_or(false) && !r.best.plan.cast_at_gather)
    throw UserError("--cast-at-gather yes needs all-gathers to cast for: the chosen plan has none (" +
                    PlanSummary(r.best.plan) + "); give --strategy full_shard with --gpus 2 or more, or drop it");

  if (req.cuda_graph.value_or(false) && !r.best.plan.cuda_graph)
    throw UserError("--cuda-graph yes captures the step on one GPU without offload, attention in the window and "
                    "every target trained: the chosen plan is not one (" + PlanSummary(r.best.plan) +
                    "); give --gpus 1 and --offload none, or drop --cuda-graph");

  if (o.json) {
    nlohmann::json j = EstimateToJson(r.best, profile);
    j["found"] = r.found;
    j["train"] = {{"tokens", r.train_tokens}, {"seconds", r.train_seconds}, {"cost_usd", r.train_cost}};
    nlohmann::json alts = nlohmann::json::array();
    for (const auto& a : r.alternatives) {
      nlohmann::json aj = EstimateToJson(a.estimate, profile);
      aj["reason"] = a.reason;
      alts.push_back(aj);
    }
    j["alternatives"] = alts;
    j["search"] = {{"plans_evaluated", r.evaluated}, {"milliseconds", ms}};
    j["calibration"] = CalibrationJson(calibration);
    std::cout << j.dump(2) << "\n";
  } else {
    const ModelSpec& m = req.model;
    std::cout << "llmplan estimate: " << m.name << " (" << WithCommas(static_cast<double>(m.TotalParams()))
              << " parameters) on " << r.best.plan.gpus << " x " << profile.name << ", seq " << req.seq_len << "\n";
    std::cout << "profile: " << profile.source.substr(0, 110) << (profile.source.size() > 110 ? "..." : "") << "\n";
    std::cout << CalibrationLine(calibration, calibration_off_by) << "\n\n";
    PrintEstimate(std::cout, r.best, profile);
    if (r.found) {
      std::cout << "\nTraining " << WithCommas(r.train_tokens) << " tokens"
                << (req.train_tokens > 0 ? "" : " (20 per parameter)") << ": " << FormatSeconds(r.train_seconds);
      if (r.train_cost > 0) std::cout << ", about $" << WithCommas(r.train_cost) << " at $" << profile.price_per_gpu_hour
                                      << "/GPU-hour";
      std::cout << "\n";
    }
    if (!r.alternatives.empty()) {
      std::cout << "\nAlternatives\n";
      for (size_t i = 0; i < r.alternatives.size(); ++i) {
        const auto& a = r.alternatives[i];
        const Plan& p = a.estimate.plan;
        char line[512];
        const std::string what = PlanSummary(p);
        std::snprintf(line, sizeof line, "  %zu. %-70s %9s tok/s/GPU  %s\n", i + 1, what.c_str(),
                      a.estimate.fits ? WithCommas(a.estimate.tokens_per_second_per_gpu).c_str() : "-",
                      a.reason.c_str());
        std::cout << line;
      }
    }
    std::cout << "\n(" << r.evaluated << " plans simulated in " << static_cast<int>(ms + 0.5) << " ms)\n";
  }
  if (!r.found) {
    // The hint follows what overflowed: the host only grows with more nodes
    // or a truer --host-memory; the device with sharding, offload, a shorter --seq.
    const bool host_short = r.best.memory.host_bytes > r.best.memory.host_capacity_bytes &&
                            r.best.memory.device_peak_bytes <= r.best.memory.capacity_bytes;
    // The disk refusal says itself what helps (more accumulation, GPUs, a faster disk).
    const bool disk_short = r.best.time.nvme_seconds > kNvmeMaxStepFraction * r.best.time.step_seconds;
    if (disk_short) throw UserError(r.why_none);
    throw UserError(r.why_none + (host_short ? "; spread the offloaded state over more GPUs (--gpus auto), offload less "
                                               "(--offload), or give the node's pinnable memory with --host-memory GIB"
                                             : "; try more GPUs (--gpus auto), --offload optimizer, or a shorter --seq"));
  }
  if (!o.out.empty()) {
    SavePlan(r.best.plan, o.out);
    if (!o.json) std::cout << "plan written to " << o.out << "\n";
  }
}

}  // namespace

void AddEstimateCommand(CLI::App& app) {
  auto o = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand("estimate", "Plan training: memory, time, throughput and the best plan");
  cmd->add_option("--model", o->model, "Preset name (llama3-8b, ...) or path to a Hugging Face config.json")->required();
  cmd->add_option("--gpus", o->gpus, "Number of GPUs, or 'auto' for the fewest that fit")->capture_default_str();
  cmd->add_option("--gpu", o->gpu, "Hardware profile name (profiles/*.json) or path")->capture_default_str();
  cmd->add_option("--seq", o->seq, "Sequence length in tokens (default: 4096, or the model's maximum if smaller)");
  cmd->add_option("--global-batch", o->global_batch, "Sequences per optimizer step over all GPUs (default: free)");
  cmd->add_option("--global-batch-tokens", o->global_batch_tokens, "Tokens per optimizer step (alternative form)")
      ->check(NumberWhere([](double v) { return v >= 1; }, "at least 1"));
  cmd->add_option("--strategy", o->strategy, "Pin: full_shard | shard_grad_op | no_shard | hybrid_shard");
  cmd->add_option("--shard-group", o->shard_group, "Pin: GPUs per shard group (hybrid_shard)");
  cmd->add_option("--micro-batch", o->micro_batch, "Pin: sequences per GPU per forward/backward");
  cmd->add_option("--grad-accum", o->grad_accum, "Pin: micro-batches per optimizer step");
  cmd->add_option("--checkpoint-layers", o->checkpoint_layers, "Pin: none | all | list such as 0,3-5");
  cmd->add_option("--offload", o->offload, "Pin: none | optimizer | params | optimizer+params");
  cmd->add_option("--replicate-edges", o->replicate_edges,
                  "Pin: yes keeps the embedding and head whole on every GPU while the blocks are sharded (no "
                  "gathers for them, one all-reduce per step); no shards them like the blocks");
  cmd->add_option("--cast-at-gather", o->cast_at_gather,
                  "Pin: yes casts each fp32 shard for every all-gather, as FSDP2 does (2 bytes a parameter of the "
                  "shard less memory, a cast on the gather's stream per gather); no keeps a bf16 copy of each shard "
                  "for the gathers. Default: cast only where the plan needs it to fit or to recompute fewer blocks");
  cmd->add_option("--cuda-graph", o->cuda_graph,
                  "Pin: yes captures the step's forward and backward as one CUDA graph, replayed every step (one "
                  "GPU, offload none; its tensors in a private memory pool); no launches every kernel from the "
                  "host. Default: the graph where it is predicted faster and fits");
  cmd->add_option("--offload-to", o->offload_to,
                  "Pin where offloaded optimizer state lives: host | nvme (default: host, NVMe where the host is short "
                  "and the profile has disk rates)");
  cmd->add_flag("--delayed-update", o->delayed_update,
                "Let plans that offload the optimizer to the host (one micro-batch per step) apply each step's "
                "gradients during the next step (ZeRO-Offload's delayed parameter update): the CPU AdamW hides "
                "under the GPU's work, and each step's gradients are taken one update late. Off by default");
  cmd->add_option("--offload-staging", o->offload_staging,
                  "Pin how the offloaded optimizer's gradients come down and its updated shards go up: unit (a "
                  "pinned host buffer per unit, gradients copied in the backward while the host is idle) | slots "
                  "(two pinned slots of the largest unit, gradients copied beside the next step's host update: "
                  "less host memory, a slower update). Default: unit where the host has room for it");
  cmd->add_option("--prefetch", o->prefetch, "Units gathered ahead of compute")->capture_default_str();
  cmd->add_option("--kernels", o->kernels,
                  "fused: RMSNorm, RoPE, SwiGLU and the cross-entropy as llmplan's CUDA kernels; composite: "
                  "LibTorch's ops (the baseline for side-by-side runs). CPUs always run the composite ops")
      ->capture_default_str();
  cmd->add_option("--attention", o->attention,
                  "window: each window of --seq tokens is one sequence; documents: attention kept inside each "
                  "document of a packed window (llmplan run --attention documents), priced by the documents of "
                  "--data")
      ->capture_default_str();
  cmd->add_option("--data", o->data,
                  "The token file to train on: its documents price --attention documents (its .docs index), its loss "
                  "mask (.lossmask, from data prepare --chat) the head");
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node (default: the profile's)");
  cmd->add_option("--host-memory", o->host_memory_gib,
                  "GiB of host memory the job may pin per node (default: the profile's per GPU x GPUs on the node)");
  cmd->add_option("--max-gpus", o->max_gpus, "Upper bound for --gpus auto")->capture_default_str();
  cmd->add_option("--train-tokens", o->train_tokens, "Tokens to train, for time and cost (default: 20 per parameter)");
  cmd->add_option("--target-days", o->target_days, "With --gpus auto: also finish --train-tokens within this time");
  cmd->add_option("--loss-chunk", o->loss_chunk,
                  "Tokens per chunk of the cross-entropy (default: 1024, and 4096 tried on the best plan)");
  cmd->add_option("--lr", o->lr, "Peak learning rate recorded in the plan")->check(LearningRate());
  cmd->add_option("--warmup-steps", o->warmup, "Warm-up steps recorded in the plan")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--decay-steps", o->decay, "Cosine decay length recorded in the plan")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_flag("--ckpt-async", o->ckpt_async,
                "The run will save checkpoints with --ckpt-async: count the host memory they stage (12 bytes per "
                "parameter of a shard, on the first shard group's ranks)");
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->add_flag("--no-calibration", o->no_calibration,
                "Predict with the profile as shipped, not refitted on the runs this machine recorded "
                "(llmplan calibrate --show lists them)");
  cmd->add_option("-o,--out", o->out, "Write the chosen plan to this file (for simulate and run)");
  cmd->callback([o] { Run(*o); });
}

}  // namespace llmplan::cli
