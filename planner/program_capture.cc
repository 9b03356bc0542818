// MarkCapturedOps (see program_builder.h): which ops of a step the CUDA graph
// holds (Plan::cuda_graph).
#include "planner/program_builder.h"

namespace llmplan {

void MarkCapturedOps(StepProgram& program) {
  // The longest prefix of the issue order the graph can hold: kernels on the
  // compute stream that never make the host wait. It ends at the clip,
  // whose factor the host computes from the norm (and the update gate reads)
  // before any AdamW is issued; a collective or a copy would end it sooner,
  // but Plan::Validate keeps those out of a graph plan.
  int captured = 0;
  for (StepOp& op : program.ops) {
    if (op.stream != StreamKind::kCompute || HostBlocks(op, /*cpu_device=*/false)) break;
    op.captured = true;
    ++captured;
  }
  program.cuda_graph = captured > 0;
  if (program.cuda_graph) program.persistent.graph_workspaces = program.persistent.workspaces;
}

}  // namespace llmplan
