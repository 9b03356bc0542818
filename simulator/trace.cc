#include "simulator/trace.h"

namespace llmplan {

ChromeTrace PredictedTrace(const StepProgram& program, const SimulationResult& sim, double persistent_bytes, int pid,
                           const std::string& process) {
  std::vector<MemorySample> memory = {{0, persistent_bytes}};
  for (const auto& sample : sim.timeline) memory.push_back({sample.time, persistent_bytes + sample.bytes});
  return StepTrace(program, sim.ops, memory, pid, process);
}

}  // namespace llmplan
