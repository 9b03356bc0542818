#include "tools/cli/report.h"

#include <cstdio>
#include <string>

#include "planner/gradient_path.h"

namespace llmplan::cli {

std::string WithCommas(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", value);
  std::string digits = buf, out;
  size_t start = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    out += digits[i];
    size_t left = digits.size() - 1 - i;
    if (i >= start && left > 0 && left % 3 == 0) out += ',';
  }
  return out;
}

namespace {

std::string Row(const std::string& label, const std::string& value) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-22s %s\n", label.c_str(), value.c_str());
  return buf;
}

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

}  // namespace

void PrintEstimate(std::ostream& out, const Estimate& e, const HardwareProfile& profile) {
  const Plan& p = e.plan;
  out << "Plan\n";
  std::string strategy = StrategyName(p.strategy);
  if (p.strategy == ShardingStrategy::kHybridShard)
    strategy += " (shard groups of " + std::to_string(p.shard_group_size) + ", " + std::to_string(p.ReplicaGroups()) +
                " replicas)";
  else if (p.strategy != ShardingStrategy::kNoShard)
    strategy += " (over " + std::to_string(p.shard_group_size) + " GPUs)";
  if (p.replicate_edges) strategy += "; embedding and head whole on every GPU";
  if (p.cast_at_gather) strategy += "; each gather casts the fp32 shard (no bf16 copy kept)";
  out << Row("strategy", strategy);
  out << Row("micro-batch", std::to_string(p.micro_batch) + " x grad-accum " + std::to_string(p.grad_accum) + " x " +
                                std::to_string(p.gpus) + " GPUs = " + std::to_string(p.GlobalBatch()) + " sequences (" +
                                WithCommas(static_cast<double>(p.TokensPerStep())) + " tokens) per step");
  out << Row("checkpointed blocks", std::to_string(p.checkpoint_layers.size()) + " of " +
                                        std::to_string(p.model.layers) + ": " + FormatLayerList(p.checkpoint_layers));
  std::string staging;
  if (OffloadsOptimizer(p.offload))
    staging = p.StagesEveryUnit() ? ", gradients staged on the host per unit (copied in the backward)"
                                  : ", gradients through the host staging slots (copied beside the host update)";
  out << Row("offload", OffloadName(p.offload) + (p.OptimizerStateOnNvme() ? ", AdamW state on NVMe" : "") +
                           (p.delayed_update ? ", delayed update (each step's gradients applied during the next)" : "") +
                           staging);
  out << Row("prefetch", std::to_string(p.prefetch_depth) + " unit(s) ahead");
  if (p.trained_fraction < 1)
    out << Row("loss", "on " + Percent(p.trained_fraction) + " of the targets (the data's loss mask): the head's logits "
                       "for those rows only");
  if (p.attention == AttentionSpan::kDocuments)
    out << Row("attention", "inside each document (" + Percent(p.document_attention_work) +
                                " of a whole window's attention work, from the data)");
  if (OptimizerReadsComputeGradient(p, profile.device_kind != "cpu"))
    out << Row("gradients", "bf16 as autograd wrote them, read by AdamW (one GPU, one micro-batch: no fp32 copy)");
  if (p.cuda_graph)
    out << Row("CUDA graph", profile.device_kind == "cpu"
                                 ? "asked for, but a CPU runs every op itself"
                                 : "the forward, backward and norm captured on the second step and replayed as one "
                                   "launch after (their tensors in the graph's own memory pool)");

  const MemoryEstimate& m = e.memory;
  out << "\nMemory per GPU at peak\n";
  for (const auto& [name, bytes] : m.breakdown)
    if (bytes > 0) out << Row(name, FormatBytes(bytes));
  out << Row("= allocated", FormatBytes(m.peak_allocated_bytes));
  out << Row("= reserved", FormatBytes(m.peak_reserved_bytes) + " (the caching allocator, replayed)");
  const double needed = m.device_peak_bytes * (1 + m.margin_fraction);
  std::string verdict = needed <= m.capacity_bytes ? "  [fits, " + FormatBytes(m.capacity_bytes - needed) + " to spare"
                                                   : "  [DOES NOT FIT";
  if (m.margin_fraction > 0) verdict += " after a " + Percent(m.margin_fraction) + " calibrated margin";
  out << Row("= device total", FormatBytes(m.device_peak_bytes) + " of " + FormatBytes(m.capacity_bytes) + " usable" +
                                   verdict + "]");
  if (m.host_bytes > 0) {
    for (const auto& [name, bytes] : m.host_breakdown)
      if (bytes > 0) out << Row("host " + name, FormatBytes(bytes));
    out << Row("= host pinned", FormatBytes(m.host_bytes) + " of " + FormatBytes(m.host_capacity_bytes) + " per GPU" +
                                    (m.host_bytes <= m.host_capacity_bytes ? "  [fits]" : "  [DOES NOT FIT]"));
  }
  if (m.nvme_bytes > 0) out << Row("NVMe (AdamW m, v)", FormatBytes(m.nvme_bytes) + " per GPU on the local SSD");

  out << "\nTime per step\n";
  for (const auto& [name, seconds] : e.time.breakdown)
    if (seconds > 0) out << Row(name, FormatSeconds(seconds));
  out << Row("= step", FormatSeconds(e.time.step_seconds));
  if (e.time.nvme_seconds > 0)
    out << Row("NVMe streaming", FormatSeconds(e.time.nvme_seconds) + " of disk time, under the CPU optimizer");
  std::string busy;
  for (const auto& [name, seconds] : e.time.stream_busy)
    if (seconds > 0) busy += (busy.empty() ? "" : ", ") + name + " " + FormatSeconds(seconds);
  out << Row("streams busy", busy);

  out << "\nThroughput\n";
  out << Row("tokens/s/GPU", WithCommas(e.tokens_per_second_per_gpu) + " (" +
                                 WithCommas(e.tokens_per_second_per_gpu * p.gpus) + " on " + std::to_string(p.gpus) +
                                 " GPUs)");
  out << Row("MFU", Percent(e.mfu) + " (HFU with recompute " + Percent(e.hfu) + ")");
}

}  // namespace llmplan::cli
