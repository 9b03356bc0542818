#include "planner/estimate.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace llmplan {

double HardwareFlopsPerToken(const Plan& plan) {
  const ModelSpec& m = plan.model;
  double matmul_params = static_cast<double>(m.ParamsPerBlock() - 2 * m.hidden);
  // Recompute repeats a block's forward: 2 FLOPs per matmul parameter and the
  // attention forward (4*T*H*Q per token, counted in full like PaLM's 12*L*H*Q*T).
  double recompute = 2 * matmul_params + 4.0 * static_cast<double>(plan.seq_len) * static_cast<double>(m.q_dim());
  return m.ModelFlopsPerToken(plan.seq_len) + recompute * static_cast<double>(plan.checkpoint_layers.size());
}

nlohmann::json EstimateToJson(const Estimate& e, const HardwareProfile& profile) {
  nlohmann::json breakdown = nlohmann::json::object(), host = nlohmann::json::object(),
                 time = nlohmann::json::object(), busy = nlohmann::json::object();
  for (const auto& [k, v] : e.memory.breakdown) breakdown[k] = v;
  for (const auto& [k, v] : e.memory.host_breakdown) host[k] = v;
  for (const auto& [k, v] : e.time.breakdown) time[k] = v;
  for (const auto& [k, v] : e.time.stream_busy) busy[k] = v;
  nlohmann::json plan = PlanToJson(e.plan);
  return {{"model",
           {{"name", e.plan.model.name},
            {"params", e.plan.model.TotalParams()},
            {"non_embedding_params", e.plan.model.NonEmbeddingParams()},
            {"flops_per_token", e.plan.model.ModelFlopsPerToken(e.plan.seq_len)}}},
          {"profile", {{"name", profile.name}, {"source", profile.source}}},
          {"plan", plan},
          {"memory",
           {{"peak_allocated_bytes", e.memory.peak_allocated_bytes},
            {"peak_reserved_bytes", e.memory.peak_reserved_bytes},
            {"device_peak_bytes", e.memory.device_peak_bytes},
            {"capacity_bytes", e.memory.capacity_bytes},
            {"breakdown", breakdown},
            {"host_bytes", e.memory.host_bytes},
            {"host_capacity_bytes", e.memory.host_capacity_bytes},
            {"host_breakdown", host},
            {"nvme_bytes", e.memory.nvme_bytes}}},
          {"time",
           {{"step_s", e.time.step_seconds},
            {"breakdown", time},
            {"stream_busy_s", busy},
            {"nvme_s", e.time.nvme_seconds}}},
          {"throughput",
           {{"tokens_per_s_per_gpu", e.tokens_per_second_per_gpu},
            {"tokens_per_s", e.tokens_per_second_per_gpu * e.plan.gpus},
            {"mfu", e.mfu},
            {"hfu", e.hfu}}},
          {"fits", e.fits},
          {"why_not", e.why_not}};
}

}  // namespace llmplan
