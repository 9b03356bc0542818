// Estimate: what a plan costs — memory per GPU and on the host, time per step,
// throughput — and whether it fits. One struct, produced by the simulator's
// EvaluatePlan, ranked by the plan search, printed by `estimate` and
// `simulate`, and later held against measurements by `compare`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/format.h"  // FormatBytes, FormatSeconds: most callers print estimates
#include "planner/hardware_profile.h"
#include "planner/plan.h"

namespace llmplan {

using NamedBytes = std::vector<std::pair<std::string, double>>;
using NamedSeconds = std::vector<std::pair<std::string, double>>;

struct MemoryEstimate {
  // What the caching allocator reports (torch.cuda.max_memory_allocated).
  double peak_allocated_bytes = 0;
  // What the caching allocator holds (max_memory_reserved): the allocator replay.
  double peak_reserved_bytes = 0;
  // Reserved plus what lives outside the allocator (CUDA context, NCCL buffers):
  // what must fit in the device.
  double device_peak_bytes = 0;
  double capacity_bytes = 0;  // the device's usable memory
  double margin_fraction = 0;  // kept free on top of device_peak_bytes (the profile's calibrated margin)
  NamedBytes breakdown;       // terms of peak_allocated, then the rest; sums to device_peak_bytes
  double host_bytes = 0;      // pinned host memory per GPU (offload)
  double host_capacity_bytes = 0;
  NamedBytes host_breakdown;
  // NVMe offload: this GPU's AdamW state in its file on the local SSD.
  double nvme_bytes = 0;
};

struct TimeEstimate {
  double step_seconds = 0;
  NamedSeconds breakdown;  // forward, backward, recompute, optimizer, exposed communication, ...
  NamedSeconds stream_busy;  // busy seconds per stream
  // NVMe offload: seconds per step the local SSD spends reading and writing
  // AdamW's state (at the profile's rates, split among the node's ranks);
  // the CPU optimizer ops overlap it with their updates.
  double nvme_seconds = 0;
};

struct Estimate {
  Plan plan;
  MemoryEstimate memory;
  TimeEstimate time;
  double tokens_per_second_per_gpu = 0;
  double mfu = 0;  // PaLM model FLOPs over the profile's bf16 peak
  double hfu = 0;  // including recompute
  bool fits = false;
  std::string why_not;  // when !fits: which term overflowed, by how much
};

// PaLM convention plus recompute of the checkpointed blocks.
double HardwareFlopsPerToken(const Plan& plan);

nlohmann::json EstimateToJson(const Estimate& e, const HardwareProfile& profile);

}  // namespace llmplan
