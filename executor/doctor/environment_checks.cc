// JudgeEnvironment (see environment_checks.h). Each variable: what it does,
// in one clause, then the verdict on this machine and what to do.
#include "executor/doctor/environment_checks.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace llmplan::executor {

namespace {

// NCCL and CUDA read their switches as integers: "1" is on, "0" and text off.
bool On(const std::string& value) { return std::strtol(value.c_str(), nullptr, 10) != 0; }

std::string Upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The NVLink multicast switches the lent machines require off.
const char* const kMulticastSwitches[][2] = {
    {"NCCL_NVLS_ENABLE", "0"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}, {"NVSHMEM_DISABLE_NVLS", "1"}};

Finding Make(const std::string& name, const std::string& value, Verdict verdict, const std::string& message) {
  Finding f;
  f.check = name;
  f.verdict = verdict;
  f.message = (value.empty() && verdict != Verdict::kOk ? name + " is empty" : name + "=" + value) + ": " + message;
  f.data = {{"variable", name}, {"value", value}, {"set", true}};
  return f;
}

Finding JudgeMulticast(const std::string& name, const std::string& value, const std::string& off) {
  if (value == off) return Make(name, value, Verdict::kOk, "NVLink multicast (NVLS) off, as the lent GPU machines require");
  return Make(name, value, Verdict::kWarning,
              "NVLink multicast (NVLS) left on: its buffers take device memory the planner does not count, and the "
              "lent GPU machines require it off (" + name + "=" + off + ")");
}

Finding JudgeNccl(const std::string& name, const std::string& value, const std::map<std::string, std::string>& all,
                  const EnvironmentFacts& facts) {
  if (name == "NCCL_P2P_DISABLE") {
    const char* does = "turns off NCCL's direct GPU-to-GPU transport (NVLink, PCIe peer-to-peer)";
    if (!On(value)) return Make(name, value, Verdict::kOk, std::string(does) + " when 1; 0 leaves it on");
    if (facts.nvlink)
      return Make(name, value, Verdict::kProblem,
                  std::string(does) + ": with NVLink between these GPUs every collective goes through host memory at a "
                                      "fraction of the speed; unset it");
    return Make(name, value, facts.gpus > 1 ? Verdict::kWarning : Verdict::kOk,
                std::string(does) + ": collectives go through host memory instead; unset it unless peer-to-peer is broken here");
  }
  if (name == "NCCL_P2P_LEVEL") {
    const char* does = "limits which GPU pairs NCCL connects directly, by topology distance (LOC: none ... SYS: all)";
    const std::string level = Upper(value);
    if (level == "LOC" || level == "0") {
      return Make(name, value, facts.nvlink ? Verdict::kProblem : Verdict::kWarning,
                  std::string(does) + ": LOC turns peer-to-peer off for every pair; unset it");
    }
    return Make(name, value, Verdict::kOk, does);
  }
  if (name == "NCCL_SHM_DISABLE") {
    const char* does = "turns off NCCL's shared-memory transport, used between GPUs without peer-to-peer";
    if (!On(value)) return Make(name, value, Verdict::kOk, does);
    const auto p2p = all.find("NCCL_P2P_DISABLE");
    const bool p2p_off = p2p != all.end() && On(p2p->second);
    if (facts.gpus > 1 && (p2p_off || !facts.all_pairs_peer))
      return Make(name, value, Verdict::kProblem,
                  std::string(does) + ": some GPU pairs here then have neither transport and NCCL falls back to "
                                      "sockets; unset it");
    return Make(name, value, Verdict::kOk, std::string(does) + "; every pair here uses peer-to-peer, so it changes nothing");
  }
  if (name == "NCCL_NVLS_ENABLE") return JudgeMulticast(name, value, "0");
  if (name == "NCCL_ALGO" || name == "NCCL_PROTO") {
    return Make(name, value, Verdict::kWarning,
                "forces NCCL's " + std::string(name == "NCCL_ALGO" ? "algorithm (Ring, Tree, ...)" : "protocol (LL, LL128, Simple)") +
                    ": collectives run at other speeds than the profile's measured curves; unset it unless measured "
                    "faster here");
  }
  if (name == "NCCL_MAX_NCHANNELS" || name == "NCCL_MIN_NCHANNELS" || name == "NCCL_MAX_CTAS" ||
      name == "NCCL_MIN_CTAS" || name == "NCCL_BUFFSIZE" || name == "NCCL_NTHREADS") {
    return Make(name, value, Verdict::kWarning,
                "changes NCCL's channels, threads or buffers: bandwidth and device memory per communicator differ "
                "from the profile's (collectives curves, collective_buffer_bytes); re-run llmplan profile with it set");
  }
  if (name == "NCCL_DEBUG")
    return Make(name, value, Verdict::kOk, "NCCL's log level (WARN, INFO, TRACE); INFO and TRACE print a lot, change nothing");
  if (name == "NCCL_DEBUG_SUBSYS" || name == "NCCL_DEBUG_FILE")
    return Make(name, value, Verdict::kOk, "where and what NCCL logs");
  if (name == "NCCL_IB_DISABLE") {
    return Make(name, value, Verdict::kOk,
                On(value) ? "no InfiniBand/RoCE for NCCL: within this node nothing changes, across nodes collectives "
                            "fall back to TCP sockets"
                          : "InfiniBand/RoCE allowed for NCCL");
  }
  if (StartsWith(name, "NCCL_IB_") || StartsWith(name, "NCCL_NET") || StartsWith(name, "NCCL_SOCKET_") ||
      name == "NCCL_CROSS_NIC")
    return Make(name, value, Verdict::kOk, "chooses NCCL's network between nodes; collectives within this node do not use it");
  if (name == "NCCL_ASYNC_ERROR_HANDLING" || name == "NCCL_BLOCKING_WAIT")
    return Make(name, value, Verdict::kOk,
                "read by PyTorch's ProcessGroupNCCL, not by llmplan (its watchdog is LLMPLAN_COLLECTIVE_TIMEOUT_S)");
  if (name == "NCCL_CUMEM_ENABLE" || name == "NCCL_LAUNCH_MODE" || name == "NCCL_RUNTIME_CONNECT")
    return Make(name, value, Verdict::kOk, "an NCCL implementation switch; no effect on plans measured so far");
  return Make(name, value, Verdict::kOk, "not one llmplan judges; NCCL reads it as documented");
}

Finding JudgeCuda(const std::string& name, const std::string& value, const EnvironmentFacts& facts) {
  if (name == "CUDA_VISIBLE_DEVICES") {
    if (value.empty() || value == "-1")
      return Make(name, value, Verdict::kWarning, "hides every GPU from CUDA programs; unset it to train on GPUs");
    return Make(name, value, Verdict::kOk,
                "the GPUs CUDA programs see, renumbered from 0 (" + std::to_string(facts.gpus) + " visible)");
  }
  if (name == "CUDA_LAUNCH_BLOCKING") {
    if (!On(value)) return Make(name, value, Verdict::kOk, "kernel launches stay asynchronous");
    return Make(name, value, Verdict::kProblem,
                "every kernel launch waits for the kernel: the host can no longer run ahead, communication no longer "
                "overlaps compute, training runs several times slower than planned; unset it (it is for debugging)");
  }
  if (name == "CUDA_DEVICE_MAX_CONNECTIONS") {
    if (value == "1")
      return Make(name, value, Verdict::kWarning,
                  "one hardware queue per GPU: llmplan's NCCL streams then queue behind compute kernels and overlap is "
                  "lost (Megatron sets it for its own ordering); unset it for llmplan run");
    return Make(name, value, Verdict::kOk, "hardware queues per GPU that streams share");
  }
  if (name == "CUDA_MODULE_LOADING") {
    if (Upper(value) == "EAGER")
      return Make(name, value, Verdict::kWarning,
                  "loads every kernel of every library at start-up: slower start and more context memory than the "
                  "profile's cuda_context_bytes (measured with lazy loading)");
    return Make(name, value, Verdict::kOk, "kernels load when first used");
  }
  if (name == "CUDA_FORCE_PTX_JIT" && On(value))
    return Make(name, value, Verdict::kWarning, "compiles every kernel from PTX at start-up: minutes before the first step");
  if (name == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") {
    const long percent = std::strtol(value.c_str(), nullptr, 10);
    if (percent > 0 && percent < 100)
      return Make(name, value, Verdict::kWarning,
                  "caps the SMs this process may use under MPS: compute runs slower than the profile measured");
    return Make(name, value, Verdict::kOk, "the share of SMs a process may use under MPS");
  }
  if (StartsWith(name, "CUDA_MPS_"))
    return Make(name, value, Verdict::kOk, "the GPU is shared through MPS; plans assume a GPU to themselves");
  if (name == "CUDA_DEVICE_ORDER") return Make(name, value, Verdict::kOk, "how CUDA numbers the GPUs");
  if (StartsWith(name, "CUDA_CACHE_")) return Make(name, value, Verdict::kOk, "the JIT kernel cache");
  return Make(name, value, Verdict::kOk, "not one llmplan judges");
}

Finding JudgeOther(const std::string& name, const std::string& value) {
  if (name == "PYTORCH_CUDA_ALLOC_CONF")
    return Make(name, value, Verdict::kWarning,
                "changes LibTorch's caching allocator (expandable_segments, max_split_size_mb, ...): reserved memory "
                "differs from what the planner predicts for the default allocator");
  if (name == "TORCH_SYMM_MEM_DISABLE_MULTICAST" || name == "NVSHMEM_DISABLE_NVLS") return JudgeMulticast(name, value, "1");
  return Make(name, value, Verdict::kOk, "not one llmplan judges");
}

bool Relevant(const std::string& name) {
  return StartsWith(name, "NCCL_") || StartsWith(name, "CUDA_") || name == "PYTORCH_CUDA_ALLOC_CONF" ||
         name == "TORCH_SYMM_MEM_DISABLE_MULTICAST" || name == "NVSHMEM_DISABLE_NVLS";
}

}  // namespace

std::map<std::string, std::string> RelevantEnvironment(char** environment) {
  std::map<std::string, std::string> variables;
  for (char** e = environment; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (Relevant(name)) variables.emplace(std::move(name), entry.substr(eq + 1));
  }
  return variables;
}

std::vector<Finding> JudgeEnvironment(const std::map<std::string, std::string>& variables, const EnvironmentFacts& facts) {
  std::vector<Finding> findings;
  for (const auto& [name, value] : variables) {
    if (facts.gpus == 0 && name != "CUDA_VISIBLE_DEVICES") {
      findings.push_back(Make(name, value, Verdict::kOk, "no GPU here, so it has no effect"));
      continue;
    }
    if (StartsWith(name, "NCCL_")) findings.push_back(JudgeNccl(name, value, variables, facts));
    else if (StartsWith(name, "CUDA_")) findings.push_back(JudgeCuda(name, value, facts));
    else findings.push_back(JudgeOther(name, value));
  }
  // NVLink multicast is on by default on NVLink-switched GPUs: llmplan turns
  // it off in its own processes, other NCCL programs here do not.
  if (facts.gpus > 1 && facts.nvlink) {
    for (const auto& [name, off] : kMulticastSwitches) {
      if (variables.count(name)) continue;
      Finding f;
      f.check = name;
      f.verdict = Verdict::kWarning;
      f.message = std::string(name) + " is unset: llmplan sets it to " + off +
                  " in its own processes, but other programs here (torchrun, PyTorch) would use NVLink multicast, "
                  "which the lent GPU machines require off: export " + name + "=" + off;
      f.data = {{"variable", name}, {"value", nullptr}, {"set", false}};
      findings.push_back(f);
    }
  }
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) { return a.check < b.check; });
  return findings;
}

}  // namespace llmplan::executor
