#include "executor/run/training_state.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include <ATen/ATen.h>

#include "base/user_error.h"
#include "executor/checkpoint/pretrained_weights.h"
#include "executor/checkpoint/safetensors.h"
#include "executor/checkpoint/sharded_checkpoint.h"
#include "executor/optimizer/nvme_optimizer_state.h"
#include "executor/sharding/shard_model.h"
#include "planner/plan.h"
#include "planner/replan_advice.h"

namespace llmplan::executor {

TrainingState::TrainingState(const TrainConfig& config, const RankSetup& rank, BatchSource& data) {
  const Plan& plan = config.plan;
  model_ = std::make_unique<LlamaModel>(plan.model, plan.fused_kernels);
  const int shard_rank = rank.comms.shard != nullptr ? rank.comms.shard->rank() : 0;
  // The initial values: the seed's, a checkpoint's (resume) or pretrained ones.
  std::unique_ptr<CheckpointReader> checkpoint;
  std::unique_ptr<PretrainedWeights> pretrained;
  UnitValues initial_values;
  if (!rank.resume_path.empty()) {
    checkpoint = std::make_unique<CheckpointReader>(rank.resume_path, *model_);
    // Damaged: refused before a byte is used, and before any rank trains.
    // Each rank checks the shards it reads, then they agree in one tiny
    // all-reduce: without it a rank whose shards were whole began a step
    // while another was still finding its own damaged.
    std::string damaged;
    try {
      checkpoint->VerifyFilesFor(plan, shard_rank);
    } catch (const UserError& e) {
      damaged = e.what();
    }
    if (rank.comms.world != nullptr) {
      at::Tensor vote = at::full({1}, damaged.empty() ? 0.0f : 1.0f, at::TensorOptions().dtype(at::kFloat));
      vote = vote.to(rank.groups.device);
      std::shared_ptr<CollectiveWork> work = rank.comms.world->AllReduce(vote, "checkpoint check");
      if (rank.watchdog != nullptr) rank.watchdog->Watch(work, "checkpoint check", rank.comms.world->name());
      work->Wait();
      const float ranks_damaged = vote.to(at::kCPU).item<float>();
      if (damaged.empty() && ranks_damaged > 0)
        throw UserError("another rank found " + rank.resume_path + " damaged (its error names the file): no rank "
                        "trained from it; resume from an older checkpoint (--resume-from)");
    }
    if (!damaged.empty()) throw UserError(damaged);
    // Which run it belongs to: the plan that saved it (its plan.json) must
    // have this plan's seed and sequence length, or the data position would
    // name other samples (the model's shape is checked parameter by
    // parameter when the shards load).
    const Plan saved_plan = LoadPlan(rank.resume_path + "/plan.json");
    if (saved_plan.seed != plan.seed || saved_plan.seq_len != plan.seq_len) {
      const std::string saved_by = "model " + saved_plan.model.name + ", seed " + std::to_string(saved_plan.seed) +
                                   ", seq " + std::to_string(saved_plan.seq_len);
      const std::string this_one = "seed " + std::to_string(plan.seed) + ", seq " + std::to_string(plan.seq_len);
      if (!config.plan_changed)
        throw UserError(rank.resume_path + " was saved by another plan (" + saved_by + "; this plan: " + this_one +
                        "): resume with that plan, or pass --plan-changed to continue it with this one");
      if (rank.rank0)
        std::cout << "llmplan: --plan-changed: continuing " << rank.resume_path << " (" << saved_by << ") with "
                  << this_one << std::endl;
    }
    // The data position indexes the sample order of the file it was saved
    // with: on another file it would index other samples.
    const checkpoint::DataIdentity& saved = checkpoint->manifest().data;
    if (saved.known() && config.data.known() && !saved.SameFileAs(config.data)) {
      if (!config.data_changed)
        throw UserError("--data " + config.data.name + " (" + std::to_string(config.data.bytes) + " bytes) is not the " +
                        "token file " + rank.resume_path + " was trained on (" + saved.name + ", " +
                        std::to_string(saved.bytes) + " bytes): pass that file, or --data-changed to continue on "
                        "this one (its samples then follow the saved data position)");
      if (rank.rank0)
        std::cout << "llmplan: --data-changed: continuing on " << config.data.name << ", not " << saved.name
                  << " which " << rank.resume_path << " was trained on" << std::endl;
    }
    initial_values = [&](int u, int64_t begin, int64_t count) { return checkpoint->Read(u, "master", begin, count); };
  } else if (!config.init_from.empty()) {
    pretrained = std::make_unique<PretrainedWeights>(config.init_from, *model_, config.init_partial);
    if (rank.rank0 && !pretrained->left_out().empty()) {
      std::cout << "llmplan: --init-partial: left out " << pretrained->left_out().size() << " tensor(s) of "
                << config.init_from << " the model does not use:";
      for (const std::string& name : pretrained->left_out()) std::cout << " " << name;
      std::cout << std::endl;
    }
    initial_values = [&](int u, int64_t begin, int64_t count) { return pretrained->UnitRange(u, begin, count); };
  }
  units_ = MakeShardedUnits(*model_, plan, rank.device, shard_rank, initial_values);
  std::shared_ptr<NvmeOptimizerState> nvme_state;
  if (plan.OptimizerStateOnNvme()) {
    nvme_state = std::make_shared<NvmeOptimizerState>(NvmeStatePath(config.nvme_dir, rank.env.rank), ShardNumels(units_));
    if (!nvme_state->direct() && rank.rank0 && config.progress)
      std::cerr << "llmplan: notice: " << config.nvme_dir << " does not take O_DIRECT (tmpfs?): the AdamW state "
                << "goes through the page cache" << std::endl;
  }
  optimizer_ = std::make_unique<AdamW>(plan.optimizer, ShardNumels(units_), rank.device, /*allow_fused=*/true,
                                       /*state_on_host=*/config.program.offload.optimizer_on_host, nvme_state);
  if (checkpoint) {
    checkpoint->RestoreOptimizer(units_, optimizer_->state());
    data.Seek(checkpoint->manifest().data_position);
    resumed_from_ = checkpoint->path();
    resumed_data_position_ = checkpoint->manifest().data_position;
  }
  start_step_ = optimizer_->state().step;
  // The node's cores, split between the ranks on it.
  optimizer_->SetCpuThreads(
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / rank.env.local_world_size));
  step_ = std::make_unique<StepInterpreter>(config.program, *model_, units_, *optimizer_, rank.device, rank.comms);
  step_->SetOutOfMemoryAdvice(RePlanAdvice(plan, rank.device.is_cuda()));
}

void TrainingState::WriteFinalWeights(const RankSetup& rank, const std::string& path) {
  std::map<std::string, at::Tensor> tensors;
  for (int u = 0; u < model_->num_units(); ++u) {
    at::Tensor full = FullMaster(units_[u], rank.comms.shard, rank.watchdog.get(), "unit " + std::to_string(u));
    if (!rank.rank0) continue;
    int64_t offset = 0;
    for (const ParamShape& p : units_[u].shapes()) {
      tensors[p.name] = full.narrow(0, offset, p.numel()).view(p.shape).clone();
      offset += p.numel();
    }
  }
  if (rank.rank0)
    checkpoint::WriteSafetensors(path, tensors, {{"format", "pt"}, {"written_by", "llmplan run"}}, "final weights");
}

}  // namespace llmplan::executor
