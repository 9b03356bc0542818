#include "simulator/trace.h"

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

ChromeTrace StepTrace(const StepProgram& program, const std::vector<OpTiming>& ops,
                      const std::vector<MemorySample>& memory, int pid, const std::string& process) {
  ChromeTrace trace(pid, process);
  for (int s = 0; s < kNumStreams; ++s) trace.NameTrack(s, StreamName(static_cast<StreamKind>(s)));
  for (const auto& op : program.ops) {
    if (op.kind == OpKind::kRelease) continue;  // zero-length memory events
    const OpTiming& t = ops.at(op.id);
    nlohmann::json args = {{"op", op.id}, {"kind", OpKindName(op.kind)}};
    if (op.unit >= 0) args["unit"] = op.unit;
    if (op.micro_batch >= 0) args["micro_batch"] = op.micro_batch;
    if (op.work.collective_bytes > 0) args["bytes"] = op.work.collective_bytes;
    if (op.work.copy_bytes > 0) args["bytes"] = op.work.copy_bytes;
    trace.AddSpan(static_cast<int>(op.stream), op.name, OpKindName(op.kind), t.start, t.end, std::move(args));
  }
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  for (const auto& sample : memory) trace.AddCounter("memory allocated (GiB)", sample.time, sample.bytes / kGiB);
  return trace;
}

ChromeTrace PredictedTrace(const StepProgram& program, const SimulationResult& sim, double persistent_bytes, int pid,
                           const std::string& process) {
  std::vector<MemorySample> memory = {{0, persistent_bytes}};
  for (const auto& sample : sim.timeline) memory.push_back({sample.time, persistent_bytes + sample.bytes});
  return StepTrace(program, sim.ops, memory, pid, process);
}

}  // namespace llmplan
