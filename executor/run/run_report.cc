#include "executor/run/run_report.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include "executor/checkpoint/checkpoint_store.h"
#include "executor/hardware/host_memory.h"
#include "executor/run/rank_peaks.h"
#include "executor/sharding/shard_model.h"
#include "executor/torch_compat.h"
#include "planner/estimate.h"

namespace llmplan::executor {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The test hook of a leaking run (tests/executor/run_reporting_test.cc):
// LLMPLAN_TEST_LEAK_MIB_PER_STEP=N keeps N MiB more host memory after every
// step, written so that it is resident. Unset: nothing.
void MaybeLeakForTest() {
  static const int64_t bytes = [] {
    const char* text = std::getenv("LLMPLAN_TEST_LEAK_MIB_PER_STEP");
    return text == nullptr ? int64_t{0} : static_cast<int64_t>(std::atof(text) * (1 << 20));
  }();
  static std::vector<std::unique_ptr<char[]>> kept;
  if (bytes <= 0) return;
  kept.emplace_back(new char[static_cast<size_t>(bytes)]);
  std::memset(kept.back().get(), 1, static_cast<size_t>(bytes));
}

// A resumed run's GPU-hours continue from what its directory recorded, read
// before PrepareRunDirectory drops the steps it redoes (paid for all the same).
double PrepareDirectory(const TrainConfig& config, const RankSetup& rank, int64_t start_step) {
  if (!rank.run_dir_lock) return 0;
  const double earlier = config.run_dir_mode == RunDirectoryMode::kResume ? RecordedGpuHours(config.run_dir) : 0;
  PrepareRunDirectory(config.run_dir, config.run_dir_mode, start_step);
  return earlier;
}

std::string ProbeAttentionBackend(const Plan& plan, const at::Device& device) {
  if (!device.is_cuda()) return "math";
  auto opts = at::TensorOptions().dtype(ComputeDtype(plan)).device(device);
  const ModelSpec& m = plan.model;
  at::Tensor q = at::empty({plan.micro_batch, m.heads, plan.seq_len, m.head_dim}, opts);
  at::Tensor kv = at::empty({plan.micro_batch, m.kv_heads, plan.seq_len, m.head_dim}, opts);
  return compat::AttentionBackendName(q, kv, kv);
}

// What one rank is called in the progress and cost lines.
std::string PerDevice(const RankSetup& rank) { return rank.device.is_cuda() ? "GPU" : "rank"; }

double Price(const TrainConfig& config) {
  return config.price_per_gpu_hour >= 0 ? config.price_per_gpu_hour : config.profile.price_per_gpu_hour;
}

}  // namespace

RunReport::RunReport(const TrainConfig& config, const RankSetup& rank, const TrainingState& state,
                     Clock::time_point run_start)
    : config_(config),
      rank_(rank),
      run_start_(run_start),
      start_step_(state.start_step()),
      earlier_gpu_hours_(PrepareDirectory(config, rank, state.start_step())),
      peak_flops_(config.profile.bf16_peak_flops),
      model_flops_(config.plan.model.ModelFlopsPerToken(config.plan.seq_len)),
      hardware_flops_(HardwareFlopsPerToken(config.plan)),
      log_(rank.rank0 ? config.run_dir : std::string(), config.steps, config.progress && rank.rank0, PerDevice(rank),
           /*append=*/config.run_dir_mode == RunDirectoryMode::kResume),
      cost_(rank.env.world_size, earlier_gpu_hours_, Price(config), config.plan.TokensPerStep(),
            config.target_tokens > 0 ? config.target_tokens : config.steps * config.plan.TokensPerStep()),
      own_peak_writable_(!config.run_dir.empty()) {
  const Plan& plan = config.plan;
  log_.WritePlanAndProgram(plan, config.program);
  summary_.device = rank.device.str();
  summary_.torch_version = compat::TorchVersion();
  summary_.attention_backend = ProbeAttentionBackend(plan, rank.device);
  summary_.start_step = start_step_;
  if (!state.resumed_from().empty()) {
    summary_.resumed_from = state.resumed_from();
    if (rank.rank0 && config.progress)
      std::cout << "resumed from " << state.resumed_from() << " (step " << start_step_ << ", sample "
                << state.resumed_data_position() << ")" << std::endl;
  }
  summary_.earlier_gpu_hours = earlier_gpu_hours_;
  summary_.predicted_tokens_per_s_per_gpu = rank.rank0 ? config.predicted_tokens_per_s_per_gpu : 0;
  if (rank.rank0 && config.progress && !(Price(config) > 0))
    std::cout << "cost: no price per " << PerDevice(rank) << "-hour ("
              << (config.price_per_gpu_hour == 0 ? "--price 0"
                                                 : "the " + config.profile.name + " profile has none; pass --price DOLLARS")
              << "): reported in " << PerDevice(rank) << "-hours only" << std::endl;
  own_peak_.rank = rank.env.rank;
  own_peak_.host = HostName();
}

namespace {

nlohmann::json EvaluationJson(const EvaluationRow& row) {
  return {{"step", row.step}, {"loss", row.loss}, {"perplexity", row.perplexity}};
}

}  // namespace

void RunReport::RecordEvaluation(const EvaluationRow& row, const std::optional<EvaluationRow>& best) {
  nlohmann::json& e = summary_.evaluation;
  if (!e.is_object())
    e = {{"every", config_.eval_every},
         {"micro_batches", config_.eval_program.micro_batches},
         {"tokens", row.tokens},
         {"peak_allocated_bytes", int64_t{0}}};
  eval_seconds_.push_back(row.seconds);
  e["evaluations"] = eval_seconds_.size();
  // The first pays for the allocator's warm-up and kernel selection: out of
  // the mean whenever there is another.
  const size_t skip = eval_seconds_.size() > 1 ? 1 : 0;
  double total = 0;
  for (size_t k = skip; k < eval_seconds_.size(); ++k) total += eval_seconds_[k];
  e["mean_s"] = total / static_cast<double>(eval_seconds_.size() - skip);
  e["last"] = EvaluationJson(row);
  if (best) e["best"] = EvaluationJson(*best);
  e["best_checkpoint"] = config_.keep_best && best && !config_.ckpt_dir.empty()
                             ? checkpoint::CheckpointStore(config_.ckpt_dir).PathOf(best->step)
                             : std::string();
  e["peak_allocated_bytes"] = std::max(e["peak_allocated_bytes"].get<int64_t>(), row.peak_allocated_bytes);
  if (row.predicted_seconds > 0) e["predicted_s"] = row.predicted_seconds;
  if (row.predicted_peak_allocated_bytes > 0) e["predicted_peak_allocated_bytes"] = row.predicted_peak_allocated_bytes;
}

void RunReport::Step(const StepResult& r, const StepTiming& timing, int64_t steps_taken, int64_t data_position,
                     const std::optional<EvaluationRow>& evaluation, const std::optional<EvaluationRow>& best) {
  const Plan& plan = config_.plan;
  StepMetrics m;
  m.step = steps_taken;
  m.loss = r.loss;
  m.lr = r.lr;
  m.grad_norm = r.grad_norm;
  m.update_skipped = r.update_skipped;
  m.kernel_traced = timing.kernel_traced;
  m.tokens_per_s = static_cast<double>(plan.TokensPerStep()) / timing.step_s;
  // MFU is per GPU: this rank's tokens against one device's peak.
  m.tokens_per_s_per_gpu = m.tokens_per_s / plan.gpus;
  m.mfu = peak_flops_ > 0 ? m.tokens_per_s_per_gpu * model_flops_ / peak_flops_ : 0;
  m.hfu = peak_flops_ > 0 ? m.tokens_per_s_per_gpu * hardware_flops_ / peak_flops_ : 0;
  const StepMeasurement& measured = r.measurement;
  m.peak_allocated_bytes = measured.peak_allocated;
  m.peak_reserved_bytes = measured.peak_reserved;
  m.memory_source = measured.memory_source;
  m.data_s = timing.data_s;
  m.forward_s = r.forward_s;
  m.recompute_s = r.recompute_s;
  m.backward_s = r.backward_s;
  m.optimizer_s = r.optimizer_s;
  m.comm_s = r.comm_s;
  m.step_s = timing.step_s;
  m.run_s = timing.run_s;
  m.all_issued_s = measured.all_issued_s;
  m.synced_s = measured.synced_s;
  m.read_s = measured.read_s;
  m.returned_s = measured.returned_s;
  m.data_position = data_position;
  MaybeLeakForTest();
  m.host_anon_rss_bytes = ProcessAnonRssBytes();
  m.pinned_host_bytes = PinnedHostBytes();
  m.predicted_tokens_per_s_per_gpu = summary_.predicted_tokens_per_s_per_gpu;
  if (!r.update_skipped) PredictAtHostAdam(measured, m.step);
  m.predicted_at_host_adam_tokens_per_s_per_gpu = at_host_adam_tokens_per_s_per_gpu_;
  m.cost = cost_.StepDone(steps_taken, SecondsSince(run_start_), timing.step_s);
  m.evaluation = evaluation;
  summary_.losses.push_back(r.loss);  // the step is done even if its line cannot be written
  if (evaluation) RecordEvaluation(*evaluation, best);
  log_.LogStep(m, measured);

  summary_.peak_allocated_bytes = std::max(summary_.peak_allocated_bytes, measured.peak_allocated);
  summary_.peak_reserved_bytes = std::max(summary_.peak_reserved_bytes, measured.peak_reserved);
  summary_.memory_source = measured.memory_source;
  // The first step pays for allocator warm-up and kernel selection (under a
  // CUDA graph the second for its capture): leave them out of the
  // throughput means whenever there is another step; the traced step pays
  // for the profiler.
  const bool first = steps_taken - 1 == start_step_;
  const int64_t warm_up_steps = config_.plan.cuda_graph ? 2 : 1;
  const bool warming = steps_taken - start_step_ <= warm_up_steps;
  if ((!warming || config_.steps - start_step_ <= warm_up_steps) && !timing.kernel_traced) {
    timed_tokens_per_s_ += m.tokens_per_s;
    timed_tokens_per_s_per_gpu_ += m.tokens_per_s_per_gpu;
    timed_mfu_ += m.mfu;
    timed_hfu_ += m.hfu;
    ++timed_steps_;
  }
  if (!first) {
    const std::string warning =
        loader_watch_.Step(m.step, timing.data_s, timing.step_s, config_.loader_workers, config_.loader_prefetch);
    if (!warning.empty())
      std::cerr << "llmplan: warning: "
                << (rank_.env.world_size > 1 ? "rank " + std::to_string(rank_.env.rank) + ": " : "") << warning
                << std::endl;
  }
  if (const std::string growing = host_memory_watch_.Step(m.step, timing.step_s, m.host_anon_rss_bytes); !growing.empty()) {
    std::cerr << "llmplan: warning: " << (rank_.env.world_size > 1 ? "rank " + std::to_string(rank_.env.rank) + ": " : "")
              << growing << std::endl;
    if (rank_.rank0) {
      const HostMemoryGrowth& g = *host_memory_watch_.growth();
      summary_.host_memory_growth = {{"from_step", g.from_step},        {"to_step", g.to_step},
                                     {"from_bytes", g.from_bytes},      {"to_bytes", g.to_bytes},
                                     {"bytes_per_step", g.bytes_per_step}, {"bytes_per_hour", g.bytes_per_hour}};
    }
  }
  RecordPeak(measured, m.step);
  CheckPrediction(steps_taken);
}

void RunReport::CheckPrediction(int64_t steps_taken) {
  // Two warm-up steps (allocator growth, kernel selection, NCCL's
  // connections: feedback/measured_run.h) and three timed ones; a shorter
  // run is checked at its end from its third step.
  constexpr int64_t kWarmUpAndTimed = 5;
  const int64_t here = steps_taken - start_step_;
  if (prediction_checked_ || !rank_.rank0 || !config_.check_prediction || config_.run_dir.empty()) return;
  if (here < kWarmUpAndTimed && !(steps_taken == config_.steps && here >= 3)) return;
  prediction_checked_ = true;
  nlohmann::json notice;
  try {
    notice = config_.check_prediction(config_.run_dir);
  } catch (const std::exception&) {
    return;  // a check that cannot be made is no reason to stop training
  }
  if (!notice.is_object()) return;
  summary_.prediction_disagreement = notice;
  if (config_.progress && notice.contains("message") && notice["message"].is_string())
    std::cout << (log_.terminal() ? "\n" : "") << notice["message"].get<std::string>() << std::endl;
}

void RunReport::PredictAtHostAdam(const StepMeasurement& measured, int64_t step) {
  // The first step whose update ran: a step applies the one before's update
  // (StepInterpreter), so a run's first applies none. Three tries at most.
  if (at_host_adam_tokens_per_s_per_gpu_ > 0 || host_adam_tries_ >= 3 || !rank_.rank0 || !config_.predict_at_host_adam)
    return;
  ++host_adam_tries_;
  double seconds = 0, params = 0;
  for (const StepOp& op : config_.program.ops) {
    if (op.kind != OpKind::kCpuOptimizerStep || op.id >= static_cast<int>(measured.ops.size())) continue;
    const OpMeasurement& o = measured.ops[op.id];
    if (!o.measured) return;  // a step that did not time its host AdamW says nothing
    seconds += o.end_s - o.start_s;
    params += op.work.cpu_adam_params;
  }
  if (!(seconds > 0) || !(params > 0)) return;  // no optimizer offload
  double predicted = 0;
  try {
    predicted = config_.predict_at_host_adam(seconds);
  } catch (const std::exception&) {
    return;  // a prediction that cannot be made is no reason to stop training
  }
  if (!(predicted > 0)) return;  // the update did no work here (TrainConfig::predict_at_host_adam)
  at_host_adam_tokens_per_s_per_gpu_ = predicted;
  summary_.host_adam_prediction = {{"step", step},
                                   {"cpu_adam_seconds", seconds},
                                   {"params_per_s", params / seconds},
                                   {"predicted_tokens_per_s_per_gpu", predicted}};
  if (!config_.progress) return;
  char line[320];
  std::snprintf(line, sizeof line,
                "host AdamW in step %lld: %.3g G params/s; at that rate the plan predicts %.0f tok/s/%s (its "
                "profile's rate: %.0f)",
                static_cast<long long>(step), params / seconds / 1e9, predicted, PerDevice(rank_).c_str(),
                summary_.predicted_tokens_per_s_per_gpu);
  std::cout << (log_.terminal() ? "\n" : "") << line << std::endl;
}

// This rank's peak memory, written to run_dir when it grows (rank_peaks.h)
// and before the stop vote: once rank 0 is past the last step's vote, every
// rank's file holds its final peak. A rank that cannot write it says so once
// and trains on.
void RunReport::RecordPeak(const StepMeasurement& measured, int64_t step) {
  if (!own_peak_writable_ ||
      (measured.peak_allocated <= own_peak_.peak_allocated_bytes && measured.peak_reserved <= own_peak_.peak_reserved_bytes))
    return;
  own_peak_.step = step;
  own_peak_.peak_allocated_bytes = std::max(own_peak_.peak_allocated_bytes, measured.peak_allocated);
  own_peak_.peak_reserved_bytes = std::max(own_peak_.peak_reserved_bytes, measured.peak_reserved);
  own_peak_.memory_source = measured.memory_source;
  try {
    std::error_code ec;
    std::filesystem::create_directories(config_.run_dir, ec);  // another node's ranks may not see rank 0's
    WriteRankPeak(config_.run_dir, own_peak_, rank_.env.world_size);
  } catch (const std::exception& e) {
    own_peak_writable_ = false;
    std::cerr << "llmplan: warning: rank " << rank_.env.rank << ": its peak memory will be missing from the summary: "
              << e.what() << std::endl;
  }
}

void RunReport::WriteTrace(const StepProgram& program, const StepMeasurement& measurement) {
  log_.WriteTrace(program, measurement);
}

void RunReport::Stopped(int signal) {
  summary_.stopped_by = signal == SIGINT ? "SIGINT" : signal == SIGHUP ? "SIGHUP" : "SIGTERM";
}

void RunReport::CompleteSummary(const std::string& last_checkpoint, int64_t checkpoint_staging_bytes) {
  RunSummary& s = summary_;
  s.last_checkpoint = last_checkpoint;
  s.steps = static_cast<int64_t>(s.losses.size());
  s.last_step = start_step_ + s.steps;
  if (!s.losses.empty()) {
    s.first_loss = s.losses.front();
    s.final_loss = s.losses.back();
  }
  if (timed_steps_ > 0) {
    s.mean_tokens_per_s = timed_tokens_per_s_ / static_cast<double>(timed_steps_);
    s.mean_tokens_per_s_per_gpu = timed_tokens_per_s_per_gpu_ / static_cast<double>(timed_steps_);
    s.mean_mfu = timed_mfu_ / static_cast<double>(timed_steps_);
    s.mean_hfu = timed_hfu_ / static_cast<double>(timed_steps_);
  }
  s.peak_pinned_host_bytes = PeakPinnedHostBytes();
  s.peak_host_rss_bytes = ProcessPeakRssBytes();
  s.checkpoint_staging_bytes = checkpoint_staging_bytes;
  s.total_s = SecondsSince(run_start_);
  s.cost = cost_.At(s.last_step, s.total_s);
  s.data_wait_fraction = loader_watch_.wait_fraction();
  s.loader_bound_steps = loader_watch_.bound_steps();
  // Every rank's peak, the failed rank's too when a rank failed (rank_peaks.h).
  if (rank_.rank0 && !config_.run_dir.empty()) s.rank_peaks = ReadRankPeaks(config_.run_dir, rank_.env.world_size);
}

RunSummary RunReport::Complete(const std::string& last_checkpoint, int64_t checkpoint_staging_bytes) {
  summary_.status = stopped() ? "stopped" : "completed";
  CompleteSummary(last_checkpoint, checkpoint_staging_bytes);
  log_.Finish(summary_);
  return summary_;
}

void RunReport::Fail(const std::exception& error, const std::string& last_checkpoint,
                     int64_t checkpoint_staging_bytes) {
  summary_.status = "failed";
  const std::string what = error.what();
  summary_.error = what.substr(0, what.find('\n'));  // LibTorch's errors carry a backtrace after the first line
  CompleteSummary(last_checkpoint, checkpoint_staging_bytes);
  try {
    log_.Finish(summary_);
  } catch (const std::exception& not_written) {  // the disk that failed the run, most likely
    if (rank_.rank0) std::cerr << "llmplan: warning: " << not_written.what() << std::endl;
  }
}

}  // namespace llmplan::executor
