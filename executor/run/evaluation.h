// RunEvaluation: `llmplan run --eval-data FILE --eval-every N`: the loss on
// held-out tokens, every N steps and after the run's last step, and (with
// --keep-best) the checkpoint of the lowest evaluation loss kept beside the
// newest --ckpt-keep ones.
//
// The batches: the file's first eval_program.micro_batches global
// micro-batches of consecutive windows (seq_len + 1 tokens each, no shuffle),
// rank r taking rows r * micro_batch.. of each as it does in training. They
// are read once, at the start, so every evaluation — and every evaluation of
// a resumed run — sees exactly the same tokens.
//
// The best: CKPT_DIR/best.json {"step", "eval_loss", "checkpoint"}, written
// by rank 0 once that step's checkpoint is saved; the checkpoint store never
// prunes the checkpoint it names (checkpoint_store.h). A resumed run reads
// it back, so it keeps comparing against the best so far; a best.json naming
// a step after the one resumed from (a future this run will redo) is
// forgotten.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/run/metrics.h"
#include "executor/run/rank_setup.h"
#include "executor/run/trainer.h"
#include "executor/step/step_interpreter.h"

namespace llmplan::executor {

class RunEvaluation {
 public:
  // Reads this rank's evaluation batches from config.eval_data (nothing when
  // it is empty) and, with keep_best, the best so far from the checkpoint
  // directory. `start_step`: steps already taken (a resumed run's).
  // Throws UserError (one line) for a file that is missing, too short for
  // the batches asked, or holds a token id outside the model's vocabulary.
  RunEvaluation(const TrainConfig& config, const RankSetup& rank, int64_t start_step);

  bool enabled() const { return !batches_.empty(); }
  // Whether step `step` (from 1) is evaluated: every eval_every, and the last.
  bool Due(int64_t step) const;
  // Evaluates on `step` (the state after it) and returns the row; the best
  // so far is updated. With keep_best a new best is recorded by saving its
  // checkpoint (RunCheckpoints::Save with the row as the best): best.json
  // names it once it is complete.
  EvaluationRow Evaluate(StepInterpreter& interpreter, int64_t step);
  bool keeps_best() const { return keep_best_; }
  // The best so far ({} before the first evaluation).
  std::optional<EvaluationRow> best() const { return best_; }

 private:
  const TrainConfig& config_;
  bool rank0_;
  bool keep_best_;
  std::vector<at::Tensor> batches_;  // this rank's, on the host
  int64_t tokens_ = 0;               // the whole job's per evaluation
  std::optional<EvaluationRow> best_;
};

}  // namespace llmplan::executor
