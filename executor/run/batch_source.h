// BatchSource: where the trainer takes its micro-batches from. The token-file
// loader (executor/data/batch_loader.h) is the real one; tests feed tokens
// from memory through the same interface.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace llmplan::executor {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next micro-batch: int64 [micro_batch, seq_len + 1] (inputs are the
  // first seq_len columns, targets the last seq_len), normally on the CPU.
  virtual at::Tensor Next() = 0;
  // Global samples consumed so far: the data position a checkpoint saves.
  virtual int64_t position() const = 0;
  // Continues from global sample `next_sample` (a resumed run's position), so
  // the next Next() returns what it would have returned there.
  // REQUIRES: called before the first Next(). Throws UserError when the
  // source cannot seek.
  virtual void Seek(int64_t next_sample) = 0;
};

}  // namespace llmplan::executor
