// RunDoctor (see doctor.h): measure, then judge (gpu_checks.h,
// environment_checks.h).
#include "executor/doctor/doctor.h"

#include <torch/version.h>

#include "executor/doctor/environment_checks.h"
#include "executor/doctor/gpu_checks.h"
#include "executor/doctor/health_all_reduce.h"
#include "executor/doctor/peer_links.h"
#include "executor/hardware/cuda_machine.h"
#include "executor/hardware/host_info.h"

namespace llmplan::executor {

namespace {

// Large enough that a copy or an all-reduce runs at the link's bandwidth,
// not its latency (the NCCL curves flatten above ~256 MiB on H200 NVLink).
constexpr double kProbeBytes = 256.0 * (1 << 20);
constexpr int kRepeats = 5;

}  // namespace

std::vector<Finding> RunDoctor(char** environment) {
  const std::map<std::string, std::string> variables = RelevantEnvironment(environment);
  const std::string driver = NvidiaDriverRelease();
  std::vector<Finding> findings;
  EnvironmentFacts facts;
#ifdef LLMPLAN_WITH_CUDA
  constexpr bool kCudaBuild = true;
  KeepNvlinkMulticastOff();
  GpuSurvey survey;
  survey.machine = ProbeCudaMachine();
  if (survey.machine.error.empty()) {
    std::vector<int> devices;
    for (const CudaDevice& d : survey.machine.devices) devices.push_back(d.index);
    for (size_t a = 0; a < devices.size(); ++a)
      for (size_t b = a + 1; b < devices.size(); ++b)
        survey.links.push_back(MeasurePeerLink(devices[a], devices[b], kProbeBytes, kRepeats));
    survey.all_reduce = RunHealthAllReduce(devices, kProbeBytes, kRepeats);
    findings = JudgeGpus(survey);
    facts.gpus = static_cast<int>(devices.size());
    facts.nvlink = AnyNvlink(survey.links);
    facts.all_pairs_peer = AllPairsPeer(survey.links);
  } else {
    findings = NoGpuFindings(survey.machine.error);
  }
#else
  constexpr bool kCudaBuild = false;
  findings = NoGpuFindings(driver.empty() ? "this llmplan was built without CUDA, and no NVIDIA driver is loaded"
                                          : "this llmplan was built without CUDA");
#endif
  findings.push_back(LibTorchFinding(TORCH_VERSION, kCudaBuild, driver));
  const HostInfo host = ReadHostInfo();
  findings.push_back(HostFinding(host.memory_bytes, host.available_bytes, host.threads));
  for (Finding& f : JudgeEnvironment(variables, facts)) findings.push_back(std::move(f));
  return findings;
}

}  // namespace llmplan::executor
