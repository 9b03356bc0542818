// The doctor's verdicts (see gpu_checks.h).
#include "executor/doctor/gpu_checks.h"

#include <algorithm>
#include <cstdio>

#include "base/format.h"  // FormatBytes
#include "executor/doctor/gpu_islands.h"

namespace llmplan::executor {

namespace {

std::string GBps(double bytes_per_s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB/s", bytes_per_s / 1e9);
  return text;
}

Finding Make(std::string check, Verdict verdict, std::string message, nlohmann::json data = nlohmann::json::object()) {
  return {std::move(check), verdict, std::move(message), std::move(data)};
}

Finding DeviceFinding(const CudaDevice& d) {
  const double used = d.memory_bytes - d.free_bytes;
  nlohmann::json data = {{"index", d.index},           {"name", d.name},
                         {"memory_bytes", d.memory_bytes}, {"free_bytes", d.free_bytes},
                         {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                         {"multiprocessors", d.multiprocessors}, {"pci_bus_id", d.pci_bus_id}};
  std::string message = d.name + ", " + FormatBytes(d.memory_bytes) + ", compute capability " +
                        std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + ", " +
                        std::to_string(d.multiprocessors) + " SMs" + (d.pci_bus_id.empty() ? "" : ", " + d.pci_bus_id);
  if (d.cc_major < 8)
    return Make("gpu " + std::to_string(d.index), Verdict::kWarning,
                message + ": no bf16 tensor cores before compute capability 8.0; train in fp32 (--dtype fp32) or on newer GPUs",
                data);
  // This process's own context takes ~0.5 GiB; more in use means another
  // process holds memory the plan counts as free.
  if (used > 4.0 * (1 << 30))
    return Make("gpu " + std::to_string(d.index), Verdict::kWarning,
                message + ": " + FormatBytes(used) + " already in use (other processes?); plans assume the whole GPU",
                data);
  return Make("gpu " + std::to_string(d.index), Verdict::kOk, message + ", " + FormatBytes(d.free_bytes) + " free", data);
}

Finding DriverFinding(const CudaMachine& m) {
  const std::string driver = CudaVersionString(m.driver_api_version), runtime = CudaVersionString(m.runtime_version);
  nlohmann::json data = {{"driver_release", m.driver_release}, {"driver_cuda", driver}, {"runtime_cuda", runtime}};
  const std::string message = "driver " + (m.driver_release.empty() ? std::string("(release unknown)") : m.driver_release) +
                              " supports CUDA " + driver + "; CUDA runtime " + runtime;
  if (m.driver_api_version < m.runtime_version)
    return Make("driver", Verdict::kProblem, message + ": the runtime is newer than the driver supports; upgrade the driver",
                data);
  return Make("driver", Verdict::kOk, message, data);
}

Finding NcclFinding(const CudaMachine& m) {
  const std::string loaded = NcclVersionString(m.nccl_loaded), built = NcclVersionString(m.nccl_built);
  nlohmann::json data = {{"loaded", loaded}, {"built_against", built}};
  const std::string message = "NCCL " + loaded + " loaded, built against " + built;
  if (m.nccl_loaded / 100 != m.nccl_built / 100)  // major.minor differ
    return Make("nccl", Verdict::kWarning,
                message + ": another NCCL than the one compiled against (LD_LIBRARY_PATH?); rebuild or load " + built, data);
  return Make("nccl", Verdict::kOk, message, data);
}

Finding LinkFinding(const PeerLink& link) {
  const std::string check = "link " + std::to_string(link.a) + "-" + std::to_string(link.b);
  const std::string link_class = LinkClass(link);
  nlohmann::json data = {{"a", link.a},
                         {"b", link.b},
                         {"peer_access", link.peer_access},
                         {"a_to_b_bytes_per_s", link.a_to_b_bytes_per_s},
                         {"b_to_a_bytes_per_s", link.b_to_a_bytes_per_s},
                         {"bytes_per_s", link.BytesPerSecond()},
                         {"link", link_class}};
  if (link_class == "failed") return Make(check, Verdict::kProblem, "peer copy failed: " + link.error, data);
  const std::string rates = GBps(link.BytesPerSecond()) + " (" + GBps(link.a_to_b_bytes_per_s) + " and " +
                            GBps(link.b_to_a_bytes_per_s) + " each way)";
  if (link_class == "nvlink") return Make(check, Verdict::kOk, "NVLink class, peer access, " + rates, data);
  if (link_class == "pcie")
    return Make(check, Verdict::kWarning,
                "PCIe class, peer access, " + rates + ": collectives over this pair run at a fraction of NVLink speed; "
                "keep shard groups on NVLink-connected GPUs or plan with a PCIe profile (l40s-pcie)",
                data);
  return Make(check, Verdict::kWarning,
              "no peer access: copies go through host memory, " + rates +
                  "; NCCL uses its shared-memory transport, far slower than NVLink",
              data);
}

// "0-3" for a run of consecutive GPUs, else "0,2,4".
std::string IslandName(const std::vector<int>& gpus) {
  const bool run = gpus.back() - gpus.front() + 1 == static_cast<int>(gpus.size());
  if (run && gpus.size() > 1) return std::to_string(gpus.front()) + "-" + std::to_string(gpus.back());
  std::string name;
  for (int g : gpus) {
    if (!name.empty()) name += ',';
    name += std::to_string(g);
  }
  return name;
}

Finding IslandsFinding(int gpus, const std::vector<PeerLink>& links) {
  const GpuIslands found = FindGpuIslands(gpus, links);
  nlohmann::json data = {{"islands", found.islands}, {"cross_island_bytes_per_s", found.cross_island_bytes_per_s}};
  if (found.islands.size() <= 1)
    return Make("islands", Verdict::kOk, "one island: every pair of the " + std::to_string(gpus) + " GPUs is alike", data);
  std::string names;
  size_t smallest = found.islands.front().size();
  for (const auto& island : found.islands) {
    if (!names.empty()) names += ", ";
    names += '{';
    names += IslandName(island);
    names += '}';
    smallest = std::min(smallest, island.size());
  }
  return Make("islands", Verdict::kWarning,
              std::to_string(found.islands.size()) + " GPU islands " + names + ", joined at " +
                  GBps(found.cross_island_bytes_per_s) + ": a shard group across them runs at that link's pace; keep "
                  "groups inside one (hybrid_shard with groups of " + std::to_string(smallest) +
                  "), and profile this machine (llmplan profile records the islands for the planner)",
              data);
}

Finding AllReduceFinding(const HealthAllReduce& r, const std::vector<PeerLink>& links) {
  nlohmann::json data = {{"gpus", r.gpus},          {"bytes", r.bytes},
                         {"sums_correct", r.sums_correct}, {"seconds", r.seconds},
                         {"bus_bytes_per_s", r.bus_bytes_per_s}};
  if (!r.error.empty()) return Make("all-reduce", Verdict::kProblem, "failed: " + r.error, data);
  const std::string what = "NCCL all-reduce of " + FormatBytes(r.bytes) + " on " + std::to_string(r.gpus) + " GPU" +
                           (r.gpus == 1 ? "" : "s");
  if (!r.sums_correct) return Make("all-reduce", Verdict::kProblem, what + ": wrong sums (" + r.mismatch + ")", data);
  if (r.gpus < 2) return Make("all-reduce", Verdict::kOk, what + ": sums correct (one GPU: no link to measure)", data);
  double slowest = 0;
  for (const PeerLink& link : links)
    if (link.error.empty()) slowest = slowest == 0 ? link.BytesPerSecond() : std::min(slowest, link.BytesPerSecond());
  const std::string measured = what + ": sums correct, bus bandwidth " + GBps(r.bus_bytes_per_s);
  if (slowest <= 0) return Make("all-reduce", Verdict::kOk, measured, data);
  const double fraction = r.bus_bytes_per_s / slowest;
  data["slowest_link_bytes_per_s"] = slowest;
  data["fraction_of_slowest_link"] = fraction;
  char share[96];
  std::snprintf(share, sizeof share, " = %.0f%% of the slowest link's %s", 100 * fraction, GBps(slowest).c_str());
  if (fraction >= kAllReduceWarnFraction) return Make("all-reduce", Verdict::kOk, measured + share, data);
  return Make("all-reduce", fraction >= kAllReduceProblemFraction ? Verdict::kWarning : Verdict::kProblem,
              measured + share + ": NCCL is not getting what the links carry (see the NCCL_* lines; NCCL_DEBUG=INFO "
                                 "shows the transport it chose)",
              data);
}

}  // namespace

std::string LinkClass(const PeerLink& link) {
  if (!link.error.empty()) return "failed";
  if (link.peer_access && link.BytesPerSecond() >= kNvlinkClassBytesPerS) return "nvlink";
  return link.peer_access ? "pcie" : "host";
}

bool AnyNvlink(const std::vector<PeerLink>& links) {
  return std::any_of(links.begin(), links.end(), [](const PeerLink& l) { return LinkClass(l) == "nvlink"; });
}

bool AllPairsPeer(const std::vector<PeerLink>& links) {
  return std::all_of(links.begin(), links.end(), [](const PeerLink& l) { return l.peer_access; });
}

std::vector<Finding> JudgeGpus(const GpuSurvey& survey) {
  std::vector<Finding> findings;
  for (const CudaDevice& d : survey.machine.devices) findings.push_back(DeviceFinding(d));
  findings.push_back(DriverFinding(survey.machine));
  findings.push_back(NcclFinding(survey.machine));
  for (const PeerLink& link : survey.links) findings.push_back(LinkFinding(link));
  if (!survey.links.empty())
    findings.push_back(IslandsFinding(static_cast<int>(survey.machine.devices.size()), survey.links));
  if (survey.all_reduce) findings.push_back(AllReduceFinding(*survey.all_reduce, survey.links));
  return findings;
}

std::vector<Finding> NoGpuFindings(const std::string& why) {
  return {Make("gpus", Verdict::kSkipped, "no GPU: " + why + "; llmplan run --cpu and llmplan profile --cpu use the CPU"),
          Make("driver", Verdict::kSkipped, "no GPU: no driver or CUDA runtime to check"),
          Make("nccl", Verdict::kSkipped, "no GPU: NCCL not checked"),
          Make("links", Verdict::kSkipped, "no GPU: no GPU pairs to measure"),
          Make("all-reduce", Verdict::kSkipped, "no GPU: no health all-reduce")};
}

Finding LibTorchFinding(const std::string& torch_version, bool cuda_build, const std::string& driver_release) {
  nlohmann::json data = {{"version", torch_version}, {"cuda_build", cuda_build}};
  if (!cuda_build && !driver_release.empty())
    return Make("libtorch", Verdict::kWarning,
                "LibTorch " + torch_version + ", but this llmplan was built without CUDA on a machine with an NVIDIA "
                "driver (" + driver_release + "): rebuild with -DLLMPLAN_WITH_CUDA=ON (tools/device/gpu_build.sh)",
                data);
  return Make("libtorch", Verdict::kOk,
              "LibTorch " + torch_version + (cuda_build ? " (CUDA build)" : " (CPU build: the CPU executor)"), data);
}

Finding HostFinding(double memory_bytes, double available_bytes, int cores) {
  nlohmann::json data = {{"memory_bytes", memory_bytes}, {"available_bytes", available_bytes}, {"cores", cores}};
  const std::string message = FormatBytes(memory_bytes) + " memory (" + FormatBytes(available_bytes) + " available), " +
                              std::to_string(cores) + " hardware threads";
  if (available_bytes < 0.1 * memory_bytes)
    return Make("host", Verdict::kWarning, message + ": little memory left for data loading and optimizer offload", data);
  return Make("host", Verdict::kOk, message, data);
}

}  // namespace llmplan::executor
