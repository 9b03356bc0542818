#include "executor/run/evaluation.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include <ATen/ATen.h>

#include "base/user_error.h"
#include "data/document_index.h"
#include "data/loss_mask.h"
#include "data/token_file.h"
#include "executor/data/batch_loader.h"
#include "executor/checkpoint/checkpoint_store.h"

namespace llmplan::executor {

namespace {

// Rank `rank`'s rows of the file's first `micro_batches` global micro-batches
// of consecutive windows, as int64 [micro_batch, seq_len + 1] tensors.
std::vector<at::Tensor> ReadEvaluationBatches(const std::string& path, int64_t micro_batches, int64_t micro_batch,
                                              int64_t seq_len, int rank, int world, int64_t vocab, bool documents) {
  const data::TokenFile file(path);
  const int64_t windows = micro_batches * world * micro_batch;
  const int64_t needed = windows * seq_len + 1;
  if (file.size() < needed)
    throw UserError("--eval-data " + path + " holds " + std::to_string(file.size()) + " tokens; " +
                    std::to_string(micro_batches) + " evaluation micro-batches of " + std::to_string(world) + " x " +
                    std::to_string(micro_batch) + " windows of " + std::to_string(seq_len) + " tokens need " +
                    std::to_string(needed) + ": lower --eval-batches or give a larger file");
  // A held-out conversation file's loss mask: the loss is the trained tokens'.
  std::unique_ptr<data::LossMaskFile> mask;
  if (const std::string mask_path = data::LossMaskPathFor(file.path()); std::filesystem::exists(mask_path))
    mask = std::make_unique<data::LossMaskFile>(mask_path, file.size());
  // With document attention, its document index (checked before launch:
  // run_command.cc).
  std::unique_ptr<data::DocumentIndex> index;
  if (documents) index = std::make_unique<data::DocumentIndex>(data::DocumentIndexPathFor(file.path()), file.size());
  std::vector<at::Tensor> batches;
  for (int64_t g = 0; g < micro_batches; ++g) {
    at::Tensor tokens = at::empty({micro_batch, seq_len + 1}, at::TensorOptions().dtype(at::kLong));
    for (int64_t row = 0; row < micro_batch; ++row) {
      const int64_t window = (g * world + rank) * micro_batch + row;
      const uint32_t largest =
          file.Read(window * seq_len, seq_len + 1, tokens.data_ptr<int64_t>() + row * (seq_len + 1));
      if (largest >= vocab)
        throw UserError("--eval-data " + path + " holds token id " + std::to_string(largest) +
                        ", outside the model's vocabulary of " + std::to_string(vocab) +
                        ": it was made with another tokenizer; prepare it with the training data's");
      data::MarkWindow(window * seq_len, seq_len + 1, mask.get(), index.get(),
                       tokens.data_ptr<int64_t>() + row * (seq_len + 1));
    }
    batches.push_back(tokens);
  }
  return batches;
}

}  // namespace

RunEvaluation::RunEvaluation(const TrainConfig& config, const RankSetup& rank, int64_t start_step)
    : config_(config), rank0_(rank.rank0), keep_best_(config.keep_best) {
  if (config.eval_data.empty()) return;
  const StepProgram& program = config.eval_program;
  batches_ = ReadEvaluationBatches(config.eval_data, program.micro_batches, program.micro_batch, program.seq_len,
                                   rank.env.rank, rank.env.world_size, config.plan.model.vocab,
                                   program.document_attention);
  tokens_ = static_cast<int64_t>(program.micro_batches) * program.micro_batch * program.seq_len * rank.env.world_size;
  if (!keep_best_ || config.ckpt_dir.empty()) return;
  // The best so far, unless it lies in the future this run redoes.
  const checkpoint::CheckpointStore store(config.ckpt_dir);
  const std::optional<checkpoint::BestCheckpoint> best = store.Best();
  if (!best) return;
  if (best->step > start_step || !std::filesystem::is_directory(store.PathOf(best->step))) {
    if (rank0_) store.SetBest(std::nullopt);
    return;
  }
  EvaluationRow row;
  row.step = best->step;
  row.loss = best->eval_loss;
  row.perplexity = std::exp(best->eval_loss);
  row.best = true;
  best_ = row;
}

bool RunEvaluation::Due(int64_t step) const {
  return enabled() && (step % config_.eval_every == 0 || step == config_.steps);
}

EvaluationRow RunEvaluation::Evaluate(StepInterpreter& interpreter, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const EvaluationResult result = interpreter.Evaluate(config_.eval_program, batches_);
  EvaluationRow row;
  row.step = step;
  row.loss = result.loss;
  row.perplexity = std::exp(result.loss);
  row.tokens = tokens_;
  row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.predicted_seconds = config_.predicted_eval_seconds;
  row.peak_allocated_bytes = result.measurement.peak_allocated;
  row.predicted_peak_allocated_bytes = config_.predicted_eval_peak_allocated_bytes;
  // Strictly lower: an evaluation a resumed run repeats does not displace the
  // checkpoint recorded for the same loss.
  row.best = std::isfinite(row.loss) && (!best_ || row.loss < best_->loss);
  if (row.best) best_ = row;
  return row;
}

}  // namespace llmplan::executor
