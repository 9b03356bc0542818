#include "base/chrome_trace.h"

#include "base/atomic_file.h"

namespace llmplan {

ChromeTrace::ChromeTrace(int pid, const std::string& process) : pid_(pid) {
  events_.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid_}, {"args", {{"name", process}}}});
}

void ChromeTrace::NameTrack(int tid, const std::string& name) {
  events_.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid_}, {"tid", tid}, {"args", {{"name", name}}}});
  events_.push_back(
      {{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid_}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
}

void ChromeTrace::AddSpan(int tid, const std::string& name, const std::string& category, double start_s, double end_s,
                          nlohmann::json args) {
  events_.push_back({{"ph", "X"},
                     {"name", name},
                     {"cat", category},
                     {"pid", pid_},
                     {"tid", tid},
                     {"ts", start_s * 1e6},
                     {"dur", (end_s - start_s) * 1e6},
                     {"args", std::move(args)}});
}

void ChromeTrace::AddCounter(const std::string& name, double t_s, double value) {
  events_.push_back({{"ph", "C"}, {"name", name}, {"pid", pid_}, {"ts", t_s * 1e6}, {"args", {{name, value}}}});
}

void ChromeTrace::Merge(const ChromeTrace& other) {
  for (const auto& e : other.events_) events_.push_back(e);
}

nlohmann::json ChromeTrace::ToJson() const { return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}}; }

void ChromeTrace::Write(const std::string& path) const {
  WriteFileAtomically(path, ToJson().dump() + "\n", "trace");
}

}  // namespace llmplan
