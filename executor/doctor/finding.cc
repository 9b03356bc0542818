// The doctor's report (see finding.h).
#include "executor/doctor/finding.h"

#include <algorithm>
#include <sstream>

namespace llmplan::executor {

namespace {

int Count(const std::vector<Finding>& findings, Verdict v) {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(), [v](const Finding& f) { return f.verdict == v; }));
}

std::string Plural(int n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kWarning: return "warning";
    case Verdict::kProblem: return "problem";
    case Verdict::kSkipped: return "skipped";
  }
  return "?";
}

std::string DoctorText(const std::vector<Finding>& findings) {
  size_t width = 0;
  for (const Finding& f : findings) width = std::max(width, f.check.size());
  std::ostringstream out;
  for (const Finding& f : findings) {
    std::string verdict = VerdictName(f.verdict);
    out << "  " << verdict << std::string(9 - verdict.size(), ' ') << f.check << std::string(width + 2 - f.check.size(), ' ')
        << f.message << "\n";
  }
  out << "llmplan doctor: " << Plural(Count(findings, Verdict::kProblem), "problem") << ", "
      << Plural(Count(findings, Verdict::kWarning), "warning");
  if (const int skipped = Count(findings, Verdict::kSkipped)) out << ", " << skipped << " skipped";
  out << "\n";
  return out.str();
}

nlohmann::json DoctorJson(const std::vector<Finding>& findings) {
  nlohmann::json checks = nlohmann::json::array();
  for (const Finding& f : findings) {
    checks.push_back({{"check", f.check}, {"verdict", VerdictName(f.verdict)}, {"message", f.message}, {"data", f.data}});
  }
  return {{"checks", checks},
          {"problems", Count(findings, Verdict::kProblem)},
          {"warnings", Count(findings, Verdict::kWarning)},
          {"exit_status", DoctorExitStatus(findings)}};
}

int DoctorExitStatus(const std::vector<Finding>& findings) { return Count(findings, Verdict::kProblem) > 0 ? 1 : 0; }

}  // namespace llmplan::executor
