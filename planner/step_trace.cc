#include "planner/step_trace.h"

namespace llmplan {

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

}  // namespace llmplan
