// The micro-batch a training step takes (StepInterpreter::Run, BatchSource):
// int64 [micro_batch, seq_len + 1] token ids, inputs the first seq_len
// columns, targets the last seq_len.
//
// A loss mask (data/loss_mask.h: fine-tuning on conversations trains the
// assistant's tokens only) travels inside the same tensor: a token whose bit
// kUntrainedTarget is set is read as its id (the bit cleared) but its loss
// as a target does not count. One tensor keeps one pinned host buffer and
// one copy to the device per micro-batch, and every batch source without a
// mask is unchanged. Ids are below 2^32, so the bit can never be an id's.
#pragma once

#include <cstdint>

namespace llmplan::executor {

inline constexpr int64_t kUntrainedTarget = int64_t{1} << 62;

}  // namespace llmplan::executor
