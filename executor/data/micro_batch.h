// The micro-batch a training step takes (StepInterpreter::Run, BatchSource):
// int64 [micro_batch, seq_len + 1] token ids, inputs the first seq_len
// columns, targets the last seq_len.
//
// Two facts about a token travel inside the same tensor, as bits above the
// id, so one tensor keeps one pinned host buffer and one copy to the device
// per micro-batch, and every batch source without them is unchanged. Ids are
// below 2^32, so neither bit can ever be an id's:
//   kUntrainedTarget  a loss mask (data/loss_mask.h: fine-tuning on
//                     conversations trains the assistant's tokens only): the
//                     token is read as its id, but its loss as a target does
//                     not count.
//   kDocumentStart    the token begins a document (data/document_index.h):
//                     with attention kept inside documents (StepProgram::
//                     document_attention) it attends to nothing before it
//                     and its position restarts at 0; as a target it does
//                     not count (nothing before it is of its document).
//                     Ignored otherwise.
#pragma once

#include <cstdint>

namespace llmplan::executor {

inline constexpr int64_t kUntrainedTarget = int64_t{1} << 62;
inline constexpr int64_t kDocumentStart = int64_t{1} << 61;
// The id without the bits above.
inline constexpr int64_t kTokenIdMask = kDocumentStart - 1;

}  // namespace llmplan::executor
