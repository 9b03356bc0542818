// The doctor's verdicts on what it measured on the GPUs: each device, the
// driver and NCCL versions, every GPU pair's link, the health all-reduce —
// and the lines it prints on a machine without a GPU. Pure: the survey is
// an argument (filled on CUDA machines by doctor.cc), so every verdict can be
// tested with the numbers of machines we do not have.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "executor/doctor/finding.h"
#include "executor/doctor/health_all_reduce.h"
#include "executor/doctor/peer_links.h"
#include "executor/hardware/cuda_machine.h"

namespace llmplan::executor {

// A pair whose slower copy direction reaches this is NVLink-connected:
// PCIe 5.0 x16 peaks at 64 GB/s per direction, NVLink 3 and 4 carry 300-450.
inline constexpr double kNvlinkClassBytesPerS = 100e9;

// An all-reduce's bus bandwidth against the slowest link's copy rate: NCCL's
// ring moves each byte over every link once per direction, so a healthy
// all-reduce reaches most of it (measured on 2 x H200: 300 GB/s against
// ~400). Below kAllReduceWarnFraction something is wrong; below
// kAllReduceProblemFraction NCCL is not using the links at all.
inline constexpr double kAllReduceWarnFraction = 0.5;
inline constexpr double kAllReduceProblemFraction = 0.2;

struct GpuSurvey {
  CudaMachine machine;
  std::vector<PeerLink> links;              // every pair, a < b
  std::optional<HealthAllReduce> all_reduce;
};

// "nvlink", "pcie" (peer access below NVLink class), "host" (no peer access:
// staged through host memory) or "failed".
std::string LinkClass(const PeerLink& link);

// Facts for JudgeEnvironment: GPUs, whether some pair is NVLink-class, whether every pair has peer access.
bool AnyNvlink(const std::vector<PeerLink>& links);
bool AllPairsPeer(const std::vector<PeerLink>& links);

// Devices, driver and runtime, NCCL, links, all-reduce, in that order.
// REQUIRES: survey.machine.error is empty and it has devices.
std::vector<Finding> JudgeGpus(const GpuSurvey& survey);

// One "skipped" line per GPU check, each saying why there is no GPU.
std::vector<Finding> NoGpuFindings(const std::string& why);

// LibTorch's version and whether this build has CUDA; a warning when it has
// none but an NVIDIA driver is loaded (`driver_release` not empty).
Finding LibTorchFinding(const std::string& torch_version, bool cuda_build, const std::string& driver_release);

// Host memory and cores; a warning when less than a tenth of the memory is available.
Finding HostFinding(double memory_bytes, double available_bytes, int cores);

}  // namespace llmplan::executor
