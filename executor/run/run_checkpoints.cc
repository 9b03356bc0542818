#include "executor/run/run_checkpoints.h"

#include <iostream>

#include "executor/checkpoint/checkpoint_store.h"

namespace llmplan::executor {

RunCheckpoints::RunCheckpoints(const TrainConfig& config, const RankSetup& rank, TrainingState& state)
    : dir_(config.ckpt_dir), warn_(rank.rank0), state_(state), tokens_per_step_(config.plan.TokensPerStep()) {
  if (dir_.empty()) return;
  CheckpointOptions o;
  o.dir = config.ckpt_dir;
  o.every = config.ckpt_every;
  o.keep = config.ckpt_keep;
  o.async = config.ckpt_async;
  o.data = config.data;
  writer_ = std::make_unique<CheckpointWriter>(config.plan, state.model(), rank.env.rank, o);
}

void RunCheckpoints::Save(int64_t taken, int64_t data_position, std::optional<checkpoint::BestCheckpoint> best) {
  if (!writer_) return;
  if (writer_->last_saved_step() == taken) {
    if (!best) return;
    // Saved already: once that save is done, name it and prune as its own
    // commit would have.
    const std::string error = writer_->Wait();
    if (!error.empty()) {
      if (warn_) std::cerr << "llmplan: warning: " << error << std::endl;
      return;
    }
    if (warn_) {
      const checkpoint::CheckpointStore store(dir_);
      store.SetBest(best);
      store.Prune(writer_->options().keep);
    }
    return;
  }
  state_.step().FinishUpdate();  // an offloaded optimizer's last update is still pending
  TrainingProgress progress{taken, data_position, taken * tokens_per_step_};
  progress.best = best;
  const std::string error = writer_->Save(state_.units(), state_.optimizer().state(), progress);
  if (!error.empty() && warn_) std::cerr << "llmplan: warning: " << error << std::endl;
}

std::string RunCheckpoints::Finish() {
  if (!writer_) return "";
  const std::string error = writer_->Wait();
  if (!error.empty() && warn_) std::cerr << "llmplan: warning: " << error << std::endl;
  return Newest();
}

std::string RunCheckpoints::Newest() const {
  return dir_.empty() ? "" : checkpoint::CheckpointStore(dir_).Newest().value_or("");
}

}  // namespace llmplan::executor
