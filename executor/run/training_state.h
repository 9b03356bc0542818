// TrainingState: what one rank trains — the plain model, its units sharded
// over the shard group (sharding/shard_model.h), the optimizer, and the step
// interpreter that runs the run's StepProgram over them — started from a
// checkpoint (resume), pretrained weights (--init-from) or the plan's seed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/model/llama_model.h"
#include "executor/optimizer/adamw.h"
#include "executor/run/batch_source.h"
#include "executor/run/rank_setup.h"
#include "executor/run/trainer.h"
#include "executor/sharding/flat_unit.h"
#include "executor/step/step_interpreter.h"

namespace llmplan::executor {

class TrainingState {
 public:
  // Builds the state on rank.device. Resuming (rank.resume_path): the
  // checkpoint's masters, AdamW state and step, and `data` seeks to its data
  // position; its files are verified before a byte is used.
  // REQUIRES: ConnectRanks(config, rank) has run. Throws UserError for a
  // damaged checkpoint or pretrained weights that do not match the model.
  TrainingState(const TrainConfig& config, const RankSetup& rank, BatchSource& data);
  TrainingState(const TrainingState&) = delete;
  TrainingState& operator=(const TrainingState&) = delete;

  LlamaModel& model() { return *model_; }
  std::vector<FlatUnit>& units() { return units_; }
  AdamW& optimizer() { return *optimizer_; }
  StepInterpreter& step() { return *step_; }
  int64_t steps_taken() const { return optimizer_->state().step; }

  int64_t start_step() const { return start_step_; }
  const std::string& resumed_from() const { return resumed_from_; }  // "" when not resumed
  int64_t resumed_data_position() const { return resumed_data_position_; }

  // The whole model in fp32 under Hugging Face names, unpadded and in each
  // parameter's shape: every shard group all-gathers its units' master
  // shards (a collective on every rank), rank 0 writes it to `path`
  // (safetensors). REQUIRES: no offloaded update is pending (FinishUpdate).
  void WriteFinalWeights(const RankSetup& rank, const std::string& path);

 private:
  std::unique_ptr<LlamaModel> model_;
  std::vector<FlatUnit> units_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<StepInterpreter> step_;
  int64_t start_step_ = 0;
  std::string resumed_from_;
  int64_t resumed_data_position_ = 0;
};

}  // namespace llmplan::executor
