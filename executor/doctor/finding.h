// Finding: one line of `llmplan doctor` — a check (a GPU, a link, an
// environment variable...), its verdict and what the user should know — and
// the report made of them, as text or JSON, with the command's exit status.
// Pure: no LibTorch, no CUDA.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmplan::executor {

enum class Verdict {
  kOk,       // measured and fine
  kWarning,  // works, but a run will be slower or use more memory than planned; or worth knowing
  kProblem,  // training here will fail or be wrong until it is fixed
  kSkipped,  // nothing to measure (no GPU)
};

// "ok", "warning", "problem", "skipped".
const char* VerdictName(Verdict v);

struct Finding {
  std::string check;    // "gpu 0", "link 0-1", "NCCL_P2P_DISABLE"
  Verdict verdict = Verdict::kOk;
  std::string message;  // one line: what was measured and, when not ok, what to do
  nlohmann::json data = nlohmann::json::object();  // the measured values, for --json
};

// One line per finding ("  ok       gpu 0   NVIDIA H200, ..."), then a
// count of problems and warnings.
std::string DoctorText(const std::vector<Finding>& findings);

// {"checks": [{"check", "verdict", "message", "data"}...], "problems": n,
//  "warnings": n, "exit_status": 0|1}.
nlohmann::json DoctorJson(const std::vector<Finding>& findings);

// 1 when a finding is a problem, else 0.
int DoctorExitStatus(const std::vector<Finding>& findings);

}  // namespace llmplan::executor
