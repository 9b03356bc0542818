// ProgramBuilder, an evaluation: each micro-batch's forward, unit by unit,
// without a gradient (see program_builder.h). Nothing is kept for a backward,
// so a block's input dies as soon as the block has read it and each unit's
// parameters are released right after its forward (the head's, and the tied
// embedding's it reads, after the head): the evaluation's peak is one block's
// temporaries over the persistent state, below the training step's.
#include "planner/program_builder.h"
#include "planner/work_model.h"

namespace llmplan {

int ProgramBuilder::EvaluationForward(int mb) {
  const int n = NumUnits();
  std::vector<int> gather(static_cast<size_t>(n), -1);
  int previous = -1;  // the unit below's forward op
  int input = -1;     // its output: this unit's input (a tensor)
  std::vector<int> layout;  // the embedding's attention layout (documents): every block reads it
  for (int u = 0; u < n; ++u) {
    if (GathersParams(u)) gather[u] = Gather(u, mb, false);
    const UnitKind kind = UnitAt(u).kind;
    StepOp op;
    op.kind = OpKind::kForward;
    op.stream = StreamKind::kCompute;
    op.unit = u;
    op.micro_batch = mb;
    op.name = OpName("eval forward", u, mb);
    op.work = kind == UnitKind::kEmbedding ? EmbeddingForwardWork(shape_)
              : kind == UnitKind::kBlock   ? BlockForwardWork(shape_)
                                           : HeadEvaluationWork(shape_);
    op.deps = {gather[u], previous};
    const MemoryCall call = kind == UnitKind::kEmbedding ? MemoryCall::kEmbeddingForward
                            : kind == UnitKind::kBlock   ? MemoryCall::kBlockForwardNoGraph
                                                         : MemoryCall::kHeadEvaluate;
    CallMemoryModel(call, {}, op.alloc_at_start, call_result_);
    // The unit below's output, read: nothing else holds it.
    tensors_.Free(input, op.alloc_at_start);
    // Whatever the call would keep for a backward dies with it (a forward
    // without a graph keeps nothing but its output).
    // The embedding's is the attention layout, kept until the head.
    for (size_t k = 0; k + 1 < call_result_.size(); ++k) {
      if (kind == UnitKind::kEmbedding) layout.push_back(call_result_[k]);
      else tensors_.Free(call_result_[k], op.alloc_at_start);
    }
    input = call_result_.empty() ? -1 : call_result_.back();
    // The head's output is the micro-batch's loss, added to the sum and dropped.
    if (kind == UnitKind::kHead) {
      tensors_.Free(input, op.alloc_at_start);
      input = -1;
      for (int id : layout) tensors_.Free(id, op.alloc_at_start);
    }
    previous = Add(std::move(op));
    if (GathersParams(u) && !KeepsParamsThroughBackward(u)) Release(u, mb, previous, false);
  }
  // The head's parameters, and the tied embedding's it read.
  for (int u : {0, n - 1})
    if (GathersParams(u) && KeepsParamsThroughBackward(u)) Release(u, mb, previous, false);
  return previous;
}

}  // namespace llmplan
