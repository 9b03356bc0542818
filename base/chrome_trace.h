// ChromeTrace: a trace in the Chrome trace-event JSON format, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: named tracks, spans on them,
// and counters.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace llmplan {

class ChromeTrace {
 public:
  // `process` names the trace's process row (e.g. "predicted rank 0").
  ChromeTrace(int pid, const std::string& process);

  // Names track `tid` (call once per track, before or after its spans).
  void NameTrack(int tid, const std::string& name);
  // A span [start, end) in seconds on track `tid`.
  void AddSpan(int tid, const std::string& name, const std::string& category, double start_s, double end_s,
               nlohmann::json args = nlohmann::json::object());
  // A counter sample (e.g. memory in GiB) at time t.
  void AddCounter(const std::string& name, double t_s, double value);

  // Appends another trace's events (e.g. predicted and measured in one file).
  void Merge(const ChromeTrace& other);
  nlohmann::json ToJson() const;
  // Writes atomically (temp file + rename). Throws UserError on failure.
  void Write(const std::string& path) const;

 private:
  int pid_;
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace llmplan
