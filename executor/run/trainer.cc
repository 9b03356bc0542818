#include "executor/run/trainer.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include "executor/run/batch_source.h"
#include "executor/run/kernel_trace.h"
#include "executor/checkpoint/checkpoint_store.h"
#include "executor/checkpoint/pretrained_weights.h"
#include "executor/checkpoint/safetensors.h"
#include "executor/checkpoint/sharded_checkpoint.h"
#include "executor/comm/collective_watchdog.h"
#include "executor/comm/distributed_env.h"
#include "executor/comm/process_groups.h"
#include "executor/data/batch_loader.h"
#include "executor/sharding/flat_unit.h"
#include "executor/hardware/host_memory.h"
#include "executor/optimizer/nvme_optimizer_state.h"
#include "executor/model/llama_model.h"
#include "executor/run/preflight.h"
#include "executor/run/rank_peaks.h"
#include "executor/run/run_cost.h"
#include "executor/optimizer/adamw.h"
#include "executor/sharding/shard_model.h"
#include "executor/step/step_interpreter.h"
#include "executor/step/step_recorder.h"
#include "executor/run/stop_request.h"
#include "executor/torch_compat.h"
#include "planner/estimate.h"
#include "planner/hardware_profile.h"
#include "planner/nvme_offload.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "base/user_error.h"

#ifdef LLMPLAN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace llmplan::executor {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "cuda" (and "cuda:0" when several ranks share the node, as `llmplan run`
// passes it) means this rank's GPU: cuda:LOCAL_RANK.
at::Device ParseDevice(std::string name, const DistributedEnv& env) {
  if (env.local_world_size > 1 && (name == "cuda" || name == "cuda:0")) name = "cuda:" + std::to_string(env.local_rank);
  if (name == "cpu") return at::Device(at::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      throw UserError("no CUDA GPU is available to this process (LibTorch " + compat::TorchVersion() +
                      (torch::cuda::device_count() == 0 ? ", 0 devices" : "") + "): pass --cpu to train on the CPU");
    at::Device d(name);
    if (d.has_index() && d.index() >= static_cast<int>(torch::cuda::device_count()))
      throw UserError("device " + name + " does not exist: " + std::to_string(torch::cuda::device_count()) +
                      " CUDA device(s) visible");
    return d.has_index() ? d : at::Device(at::kCUDA, 0);
  }
  throw UserError("unknown device '" + name + "': use cpu or cuda[:N]");
}

// The profile gives the MFU denominator and the program's memory constants.
// A plan naming a profile that is not here still trains: MFU is then 0.
HardwareProfile ProfileOrDefault(const std::string& name, bool progress) {
  try {
    return LoadHardwareProfile(name);
  } catch (const UserError& e) {
    if (progress) std::cerr << "llmplan: warning: " << e.what() << " (MFU reported as 0)\n";
    HardwareProfile p;
    p.name = name;
    return p;
  }
}

std::string ProbeAttentionBackend(const Plan& plan, const at::Device& device) {
  if (!device.is_cuda()) return "math";
  auto opts = at::TensorOptions().dtype(ComputeDtype(plan)).device(device);
  const ModelSpec& m = plan.model;
  at::Tensor q = at::empty({plan.micro_batch, m.heads, plan.seq_len, m.head_dim}, opts);
  at::Tensor kv = at::empty({plan.micro_batch, m.kv_heads, plan.seq_len, m.head_dim}, opts);
  return compat::AttentionBackendName(q, kv, kv);
}

// The loader is the bottleneck when, over the last kWindow steps (the
// run's first left out: its loader may have just started), the trainer
// waited for batches more than kFraction of their wall time. A loader that
// keeps up hands over a prepared batch in microseconds, so a wait that long
// is the device idle for want of data: a tenth of the run's GPU-hours, if it
// lasts. Judged over several steps, not one: a single late batch (the
// loader's thread descheduled on a busy host: 10 ms in a 78 ms step was seen
// on the 2-core dev machine) is not a loader worth changing. The warning
// comes once, then at most once per kEvery steps.
class LoaderWatch {
 public:
  static constexpr double kFraction = 0.1;
  static constexpr size_t kWindow = 10;
  static constexpr size_t kMinSteps = 3;
  static constexpr int64_t kEvery = 100;

  // After a step after the first; returns the warning to print, or "".
  std::string Step(int64_t step, double data_s, double step_s, int loader_workers, int loader_prefetch) {
    timed_data_s_ += data_s;
    timed_step_s_ += step_s;
    if (data_s > kFraction * step_s) ++bound_steps_;
    window_.push_back({step, data_s, step_s});
    if (window_.size() > kWindow) window_.pop_front();
    double waited = 0, took = 0;
    for (const Entry& e : window_) {
      waited += e.data_s;
      took += e.step_s;
    }
    if (window_.size() < kMinSteps || waited <= kFraction * took) return "";
    if (last_warning_ >= 0 && step - last_warning_ < kEvery) return "";
    last_warning_ = step;
    char line[400];
    std::snprintf(line, sizeof line,
                  "steps %lld-%lld waited %.3f s of their %.3f s (%.0f%%) for batches: the data loader is the "
                  "bottleneck (--loader-workers %d, --loader-prefetch %d): raise --loader-workers, or put the token "
                  "file on a faster disk",
                  static_cast<long long>(window_.front().step), static_cast<long long>(step), waited, took,
                  100.0 * waited / took, loader_workers, loader_prefetch);
    return line;
  }
  // Over every step seen: the share of their time spent waiting for batches,
  // and the steps that waited more than kFraction of their own time.
  double wait_fraction() const { return timed_step_s_ > 0 ? timed_data_s_ / timed_step_s_ : 0; }
  int64_t bound_steps() const { return bound_steps_; }

 private:
  struct Entry {
    int64_t step;
    double data_s, step_s;
  };
  std::deque<Entry> window_;
  double timed_data_s_ = 0, timed_step_s_ = 0;
  int64_t bound_steps_ = 0, last_warning_ = -1;
};

// The plan's predicted tokens per second per GPU: the estimate `llmplan
// estimate` printed for it and `llmplan compare` holds a run against. 0 when
// the profile could not be loaded (nothing to predict with).
double PredictedTokensPerSecondPerGpu(const Plan& plan, const HardwareProfile& profile) {
  if (profile.bf16_peak_flops <= 0) return 0;
  if (plan.OptimizerStateOnNvme() && !HasNvmeRates(profile)) return 0;  // the disk cannot be priced
  return EvaluatePlan(plan, profile).tokens_per_second_per_gpu;
}

// The batch loader behind the BatchSource interface.
class TokenFileBatches : public BatchSource {
 public:
  TokenFileBatches(const Plan& plan, const std::string& path, const DistributedEnv& env, int workers, int prefetch) {
    options_.path = path;
    options_.seq_len = plan.seq_len;
    options_.micro_batch = plan.micro_batch;
    options_.rank = env.rank;  // rank r reads rows r*micro_batch.. of every global micro-batch
    options_.world = env.world_size;
    options_.vocab = plan.model.vocab;
    options_.seed = plan.seed;
    options_.shuffle = true;
    options_.workers = workers;
    options_.prefetch = prefetch;
    loader_ = std::make_unique<data::BatchLoader>(options_, data::DataPosition{});
  }
  at::Tensor Next() override { return loader_->Next().tokens; }
  int64_t position() const override { return loader_->position().next_sample; }
  // A new loader whose producer starts at the position (the order is a pure
  // function of the seed and the position).
  void Seek(int64_t next_sample) override {
    loader_.reset();
    loader_ = std::make_unique<data::BatchLoader>(options_, data::DataPosition{next_sample});
  }

 private:
  data::BatchLoaderOptions options_;
  std::unique_ptr<data::BatchLoader> loader_;
};

// The whole model in fp32 under Hugging Face names, unpadded and in each
// parameter's shape: every shard group all-gathers its units' master shards
// (a collective on every rank), rank 0 writes RUN_DIR/final.safetensors.
void WriteFinalWeights(const LlamaModel& model, std::vector<FlatUnit>& units, Communicator* shard,
                       CollectiveWatchdog* watchdog, bool write, const std::string& path) {
  std::map<std::string, at::Tensor> tensors;
  for (int u = 0; u < model.num_units(); ++u) {
    at::Tensor full = FullMaster(units[u], shard, watchdog, "unit " + std::to_string(u));
    if (!write) continue;
    int64_t offset = 0;
    for (const ParamShape& p : units[u].shapes()) {
      tensors[p.name] = full.narrow(0, offset, p.numel()).view(p.shape).clone();
      offset += p.numel();
    }
  }
  if (write) checkpoint::WriteSafetensors(path, tensors, {{"format", "pt"}, {"written_by", "llmplan run"}});
}

}  // namespace

RunSummary Train(const TrainConfig& config, BatchSource& data) {
  const Plan& plan = config.plan;
  plan.Validate();
  if (config.steps < 1) throw UserError("--steps must be at least 1");
  if ((config.resume || !config.resume_from.empty()) && !config.init_from.empty())
    throw UserError("--init-from starts a new run and --resume continues one: pass one of them");
  if (config.ckpt_every < 0 || config.ckpt_keep < 1) throw UserError("--ckpt-every must be >= 0 and --ckpt-keep >= 1");
  if (config.kernel_trace_step < 0 || config.kernel_trace_step > config.steps)
    throw UserError("--kernel-trace " + std::to_string(config.kernel_trace_step) + " is not a step of this run: give 1.." +
                    std::to_string(config.steps) + " (a step after the first, which warms the allocator up)");
  const auto run_start = Clock::now();

  // --- processes: one per GPU, connected by a shard and a replica group ---
  const DistributedEnv env = ReadDistributedEnv();
  if (env.world_size != plan.gpus)
    throw UserError("the plan is for " + std::to_string(plan.gpus) + " GPU(s) but " + std::to_string(env.world_size) +
                    " process(es) were started (" + env.source + "): start one process per GPU of the plan, or make "
                    "the plan with llmplan estimate --gpus " + std::to_string(env.world_size));
  const at::Device device = ParseDevice(config.device, env);
  // What this node's ranks put in host memory (a CPU run's tensors, offloaded
  // state, --ckpt-async's staging) must fit in MemAvailable.
  CheckPlanFitsHost(plan, device, env.local_world_size,
                    CheckpointStagingRanksOnNode(config.ckpt_async && !config.ckpt_dir.empty(), plan.shard_group_size,
                                                 env.rank, env.local_rank, env.local_world_size));
  // And the AdamW state files of the node's ranks must fit on the SSD.
  if (plan.OptimizerStateOnNvme()) CheckNvmeDirectory(plan, config.nvme_dir, env.local_world_size);
#ifdef LLMPLAN_WITH_CUDA
  // Make this rank's GPU the thread's current device before any CUDA work
  // (NCCL init, streams, events, kernels): code that takes "the current
  // stream" without a device index otherwise runs on cuda:0 on every rank,
  // e.g. rank 1 launching its AdamW kernel and timing events on GPU 0.
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  const bool rank0 = env.rank == 0;
  // The run directory is rank 0's: checked and locked before anything is
  // written, so an earlier run is never overwritten by accident.
  std::unique_ptr<RunDirectoryLock> run_dir_lock;
  if (rank0 && !config.run_dir.empty()) {
    CheckRunDirectory(config.run_dir, config.run_dir_mode);
    run_dir_lock = std::make_unique<RunDirectoryLock>(config.run_dir);
  }
  // Checkpoints: which one to resume from is decided from the directory
  // alone (every rank sees the same complete checkpoints; rank 0 removes a
  // crash's partial ones before the first collective, so before any rank can
  // start a save; complete ones are pruned only after the next save).
  std::string resume_path = config.resume_from;
  if (config.resume && resume_path.empty()) {
    if (config.ckpt_dir.empty()) throw UserError("--resume needs --ckpt-dir (where the checkpoints are)");
    resume_path = checkpoint::CheckpointStore(config.ckpt_dir).Newest().value_or("");
    if (resume_path.empty() && rank0 && config.progress)
      std::cout << "no checkpoint in " << config.ckpt_dir << " yet: starting at step 0" << std::endl;
  }
  if (rank0 && !config.ckpt_dir.empty()) checkpoint::CheckpointStore(config.ckpt_dir).RemovePartials();
  StopRequest stop_request;  // SIGINT/SIGTERM: stop at the next step boundary

  // CPU tensors are counted from here on, so a CPU run reports the bytes its
  // tensors hold (as the caching allocator does on a GPU), not the RSS.
  if (!device.is_cuda()) compat::InstallCpuTensorCounter();
  ProcessGroups groups;
  std::unique_ptr<CollectiveWatchdog> watchdog;
  StepComms comms;
  if (env.world_size > 1) {
    const auto timeout = CollectiveTimeoutFromEnv(std::chrono::seconds(300));
    groups = ConnectProcessGroups(env, plan.shard_group_size, /*use_nccl=*/device.is_cuda(), device, timeout);
    HealthCheck(groups);  // every group answers before any training
    watchdog = std::make_unique<CollectiveWatchdog>(env.rank, timeout, groups.All());
    comms = StepComms{groups.shard.get(), groups.shard_reduce.get(), groups.replica.get(), groups.world.get(),
                      watchdog.get()};
  }

  // --- model, parameters (sharded over the shard group), optimizer, step program ---
  LlamaModel model(plan.model, plan.fused_kernels);
  const int shard_rank = comms.shard != nullptr ? comms.shard->rank() : 0;
  // The initial values: the seed's, a checkpoint's (resume) or pretrained ones.
  std::unique_ptr<CheckpointReader> resume_from;
  std::unique_ptr<PretrainedWeights> pretrained;
  UnitValues initial_values;
  if (!resume_path.empty()) {
    resume_from = std::make_unique<CheckpointReader>(resume_path, model);
    resume_from->VerifyFilesFor(plan, shard_rank);  // damaged: refused before a byte is used
    initial_values = [&](int u, int64_t begin, int64_t count) { return resume_from->Read(u, "master", begin, count); };
  } else if (!config.init_from.empty()) {
    pretrained = std::make_unique<PretrainedWeights>(config.init_from, model);
    initial_values = [&](int u, int64_t begin, int64_t count) { return pretrained->UnitRange(u, begin, count); };
  }
  std::vector<FlatUnit> units = MakeShardedUnits(model, plan, device, shard_rank, initial_values);
  std::shared_ptr<NvmeOptimizerState> nvme_state;
  if (plan.OptimizerStateOnNvme()) {
    nvme_state = std::make_shared<NvmeOptimizerState>(NvmeStatePath(config.nvme_dir, env.rank), ShardNumels(units));
    if (!nvme_state->direct() && rank0 && config.progress)
      std::cerr << "llmplan: notice: " << config.nvme_dir << " does not take O_DIRECT (tmpfs?): the AdamW state "
                << "goes through the page cache" << std::endl;
  }
  AdamW optimizer(plan.optimizer, ShardNumels(units), device, /*allow_fused=*/true,
                  /*state_on_host=*/OffloadsOptimizer(plan.offload), nvme_state);
  if (resume_from) {
    resume_from->RestoreOptimizer(units, optimizer.state());
    data.Seek(resume_from->manifest().data_position);
  }
  pretrained.reset();
  const int64_t start_step = optimizer.state().step;
  // The node's cores, split between the ranks on it.
  optimizer.SetCpuThreads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world_size));
  const HardwareProfile profile = ProfileOrDefault(plan.profile, config.progress && rank0);
  StepInterpreter step(plan, model, units, optimizer, BuildStepProgram(plan, profile), device, comms);

  std::unique_ptr<CheckpointWriter> checkpoints;
  if (!config.ckpt_dir.empty()) {
    CheckpointOptions o;
    o.dir = config.ckpt_dir;
    o.every = config.ckpt_every;
    o.keep = config.ckpt_keep;
    o.async = config.ckpt_async;
    checkpoints = std::make_unique<CheckpointWriter>(plan, model, env.rank, o);
  }
  // A resumed run's GPU-hours continue from what its directory recorded, read
  // before PrepareRunDirectory drops the steps it redoes (paid for all the same).
  const double earlier_gpu_hours =
      run_dir_lock && config.run_dir_mode == RunDirectoryMode::kResume ? RecordedGpuHours(config.run_dir) : 0;
  if (run_dir_lock) PrepareRunDirectory(config.run_dir, config.run_dir_mode, start_step);
  MetricsLog log(rank0 ? config.run_dir : std::string(), config.steps, config.progress && rank0,
                 device.is_cuda() ? "GPU" : "rank", /*append=*/config.run_dir_mode == RunDirectoryMode::kResume);
  log.WritePlanAndProgram(plan, step.program());
  StepKernelTrace kernel_trace(config.kernel_trace_step, config.run_dir, rank0, device.is_cuda());
  const double peak_flops = profile.bf16_peak_flops;
  const double model_flops = plan.model.ModelFlopsPerToken(plan.seq_len), hardware_flops = HardwareFlopsPerToken(plan);

  RunSummary summary;
  summary.device = device.str();
  summary.torch_version = compat::TorchVersion();
  summary.attention_backend = ProbeAttentionBackend(plan, device);
  summary.start_step = start_step;
  if (resume_from) {
    summary.resumed_from = resume_from->path();
    if (rank0 && config.progress)
      std::cout << "resumed from " << resume_from->path() << " (step " << start_step << ", sample "
                << resume_from->manifest().data_position << ")" << std::endl;
  }
  resume_from.reset();
  double timed_tokens_per_s = 0, timed_tokens_per_s_per_gpu = 0, timed_mfu = 0, timed_hfu = 0;
  int64_t timed_steps = 0;

  // Cost (run_cost.h), reported by rank 0; a CPU rank is called a rank.
  const std::string unit = device.is_cuda() ? "GPU" : "rank";
  const double price = config.price_per_gpu_hour >= 0 ? config.price_per_gpu_hour : profile.price_per_gpu_hour;
  const int64_t target_tokens = config.target_tokens > 0 ? config.target_tokens : config.steps * plan.TokensPerStep();
  CostMeter cost(env.world_size, earlier_gpu_hours, price, plan.TokensPerStep(), target_tokens);
  summary.earlier_gpu_hours = earlier_gpu_hours;
  summary.predicted_tokens_per_s_per_gpu = rank0 ? PredictedTokensPerSecondPerGpu(plan, profile) : 0;
  if (rank0 && config.progress && !(price > 0))
    std::cout << "cost: no price per " << unit << "-hour ("
              << (config.price_per_gpu_hour == 0 ? "--price 0" : "the " + profile.name + " profile has none; pass --price DOLLARS")
              << "): reported in " << unit << "-hours only" << std::endl;
  LoaderWatch loader_watch;  // is the loader the bottleneck?
  // This rank's peak memory, written to run_dir when it grows (rank_peaks.h)
  // and before the stop vote: once rank 0 is past the last step's vote,
  // every rank's file holds its final peak. A rank that cannot write it says
  // so once and trains on.
  RankPeak own_peak;
  own_peak.rank = env.rank;
  own_peak.host = HostName();
  bool own_peak_writable = !config.run_dir.empty();
  auto record_peak = [&](const StepMeasurement& measured, int64_t step_number) {
    if (!own_peak_writable || (measured.peak_allocated <= own_peak.peak_allocated_bytes &&
                               measured.peak_reserved <= own_peak.peak_reserved_bytes))
      return;
    own_peak.step = step_number;
    own_peak.peak_allocated_bytes = std::max(own_peak.peak_allocated_bytes, measured.peak_allocated);
    own_peak.peak_reserved_bytes = std::max(own_peak.peak_reserved_bytes, measured.peak_reserved);
    own_peak.memory_source = measured.memory_source;
    try {
      std::error_code ec;
      std::filesystem::create_directories(config.run_dir, ec);  // another node's ranks may not see rank 0's
      WriteRankPeak(config.run_dir, own_peak, env.world_size);
    } catch (const std::exception& e) {
      own_peak_writable = false;
      std::cerr << "llmplan: warning: rank " << env.rank << ": its peak memory will be missing from the summary: "
                << e.what() << std::endl;
    }
  };
  // Diverging steps: judged after each step; with kSkip the interpreter asks
  // before the update whether the gradient norm is acceptable.
  BadStepMonitor bad_steps(config.bad_step);
  if (config.bad_step.action == BadStepAction::kSkip)
    step.SetUpdateGate([&](double grad_norm) { return bad_steps.GradNormIsGood(grad_norm); });

  // Saves a checkpoint of the state after `taken` steps (a warning, never a
  // failure, when it cannot: the previous checkpoints are intact and
  // training goes on).
  auto save_checkpoint = [&](int64_t taken) {
    if (!checkpoints || checkpoints->last_saved_step() == taken) return;
    step.FinishUpdate();  // an offloaded optimizer's last update is still pending
    const std::string error = checkpoints->Save(
        units, optimizer.state(), TrainingProgress{taken, data.position(), taken * plan.TokensPerStep()});
    if (!error.empty() && rank0) std::cerr << "llmplan: warning: " << error << std::endl;
  };
  // The newest complete checkpoint on disk (saves may have failed, or still be in flight).
  auto newest_checkpoint = [&]() -> std::string {
    return config.ckpt_dir.empty() ? "" : checkpoint::CheckpointStore(config.ckpt_dir).Newest().value_or("");
  };
  // Every rank must stop at the same step boundary, whichever got the
  // signal: one tiny all-reduce of the signal numbers (~tens of µs, once a
  // step, outside the step program).
  auto agreed_stop_signal = [&]() -> int {
    int sig = StopRequest::Signal();
    if (comms.world == nullptr) return sig;
    at::Tensor flag = at::full({1}, static_cast<float>(sig), at::TensorOptions().dtype(at::kFloat).device(groups.device));
    comms.world->AllReduce(flag, "stop vote")->Wait();
    if (flag.to(at::kCPU).item<float>() == 0) return 0;
    return sig != 0 ? sig : SIGTERM;  // another rank's signal
  };

  // What the summary says however the run ends.
  auto complete_summary = [&] {
    summary.steps = static_cast<int64_t>(summary.losses.size());
    summary.last_step = start_step + summary.steps;
    if (!summary.losses.empty()) {
      summary.first_loss = summary.losses.front();
      summary.final_loss = summary.losses.back();
    }
    if (timed_steps > 0) {
      summary.mean_tokens_per_s = timed_tokens_per_s / static_cast<double>(timed_steps);
      summary.mean_tokens_per_s_per_gpu = timed_tokens_per_s_per_gpu / static_cast<double>(timed_steps);
      summary.mean_mfu = timed_mfu / static_cast<double>(timed_steps);
      summary.mean_hfu = timed_hfu / static_cast<double>(timed_steps);
    }
    summary.peak_pinned_host_bytes = PeakPinnedHostBytes();
    summary.peak_host_rss_bytes = ProcessPeakRssBytes();
    if (checkpoints) summary.checkpoint_staging_bytes = checkpoints->staging_bytes();
    summary.total_s = SecondsSince(run_start);
    summary.cost = cost.At(summary.last_step, summary.total_s);
    summary.data_wait_fraction = loader_watch.wait_fraction();
    summary.loader_bound_steps = loader_watch.bound_steps();
    // Every rank's peak, the failed rank's too when a rank failed (rank_peaks.h).
    if (rank0 && !config.run_dir.empty()) summary.rank_peaks = ReadRankPeaks(config.run_dir, env.world_size);
  };

  // A failure from here on (a step's UserError, out of memory, the token file
  // truncated under the loader, a full disk) still leaves summary.json:
  // status "failed", the one-line error, the last step and the newest
  // checkpoint. The exception then goes on to the caller, which exits
  // non-zero with the same line.
  try {
    // --- the loop ---
    for (int64_t taken = start_step; taken < config.steps; ++taken) {
      const auto step_start = Clock::now();
      std::vector<at::Tensor> micro_batches;
      for (int64_t mb = 0; mb < plan.grad_accum; ++mb) micro_batches.push_back(data.Next());
      const double data_s = SecondsSince(step_start);

      if (kernel_trace.Traces(taken + 1)) kernel_trace.Begin(taken + 1);
      StepResult r = step.Run(micro_batches);  // returns after the device finished the step
      if (kernel_trace.Traces(taken + 1)) kernel_trace.End(taken + 1, config.progress);
      const double step_s = SecondsSince(step_start);
      if (const std::string bad = bad_steps.Judge(r.loss, r.grad_norm); !bad.empty()) {
        const std::string where = "step " + std::to_string(taken + 1) + ": " + bad;
        if (bad_steps.policy().action == BadStepAction::kStop || (!std::isfinite(r.loss) && !r.update_skipped))
          throw std::runtime_error(where + ": training diverged; stopped before saving this state" +
                                   (newest_checkpoint().empty() ? std::string()
                                                                : " (the last checkpoint is " + newest_checkpoint() + ")") +
                                   ": lower --lr or raise warmup_steps, or pass --bad-step skip");
        if (rank0)
          std::cerr << "llmplan: warning: " << where
                    << (r.update_skipped ? ": its update was skipped" : ": its update was applied (a loss is known only after it)")
                    << std::endl;
      }

      StepMetrics m;
      m.step = optimizer.state().step;
      m.loss = r.loss;
      m.lr = r.lr;
      m.grad_norm = r.grad_norm;
      m.update_skipped = r.update_skipped;
      m.kernel_traced = kernel_trace.IsTracedStep(taken + 1);
      m.tokens_per_s = static_cast<double>(plan.TokensPerStep()) / step_s;
      // MFU is per GPU: this rank's tokens against one device's peak.
      m.tokens_per_s_per_gpu = m.tokens_per_s / plan.gpus;
      m.mfu = peak_flops > 0 ? m.tokens_per_s_per_gpu * model_flops / peak_flops : 0;
      m.hfu = peak_flops > 0 ? m.tokens_per_s_per_gpu * hardware_flops / peak_flops : 0;
      const StepMeasurement& measured = r.measurement;
      m.peak_allocated_bytes = measured.peak_allocated;
      m.peak_reserved_bytes = measured.peak_reserved;
      m.memory_source = measured.memory_source;
      m.data_s = data_s;
      m.forward_s = r.forward_s;
      m.recompute_s = r.recompute_s;
      m.backward_s = r.backward_s;
      m.optimizer_s = r.optimizer_s;
      m.comm_s = r.comm_s;
      m.step_s = step_s;
      m.data_position = data.position();
      m.predicted_tokens_per_s_per_gpu = summary.predicted_tokens_per_s_per_gpu;
      m.cost = cost.StepDone(optimizer.state().step, SecondsSince(run_start), step_s);
      summary.losses.push_back(r.loss);  // the step is done even if its line cannot be written
      log.LogStep(m, measured);

      summary.peak_allocated_bytes = std::max(summary.peak_allocated_bytes, measured.peak_allocated);
      summary.peak_reserved_bytes = std::max(summary.peak_reserved_bytes, measured.peak_reserved);
      summary.memory_source = measured.memory_source;
      // The first step pays for allocator warm-up and kernel selection: leave it
      // out of the throughput means whenever there is another step; the traced
      // step pays for the profiler.
      if ((taken > start_step || config.steps - start_step == 1) && !kernel_trace.IsTracedStep(taken + 1)) {
        timed_tokens_per_s += m.tokens_per_s;
        timed_tokens_per_s_per_gpu += m.tokens_per_s_per_gpu;
        timed_mfu += m.mfu;
        timed_hfu += m.hfu;
        ++timed_steps;
      }
      if (taken > start_step) {
        const std::string warning =
            loader_watch.Step(m.step, data_s, step_s, config.loader_workers, config.loader_prefetch);
        if (!warning.empty())
          std::cerr << "llmplan: warning: " << (env.world_size > 1 ? "rank " + std::to_string(env.rank) + ": " : "")
                    << warning << std::endl;
      }
      record_peak(measured, m.step);
      const int64_t now_taken = taken + 1;
      if (now_taken == config.steps) log.WriteTrace(step.program(), measured);
      if (const int sig = agreed_stop_signal(); sig != 0) {
        summary.stopped_by = sig == SIGINT ? "SIGINT" : "SIGTERM";
        save_checkpoint(now_taken);
        break;
      }
      if (config.ckpt_every > 0 && now_taken % config.ckpt_every == 0) save_checkpoint(now_taken);
    }

    // The last step's offloaded update, which no next step applies.
    step.FinishUpdate();
    const int64_t final_step = start_step + static_cast<int64_t>(summary.losses.size());
    if (summary.stopped_by.empty()) save_checkpoint(final_step);  // the end of the run can be continued too
    if (checkpoints) {
      const std::string error = checkpoints->Wait();
      if (!error.empty() && rank0) std::cerr << "llmplan: warning: " << error << std::endl;
      summary.last_checkpoint = newest_checkpoint();
    }
    // --- the trained model, whole, under Hugging Face names ---
    if (!config.run_dir.empty() && config.final_weights && summary.stopped_by.empty()) {
      WriteFinalWeights(model, units, comms.shard, watchdog.get(), rank0,
                        (std::filesystem::path(config.run_dir) / "final.safetensors").string());
    }
  } catch (const std::exception& e) {
    summary.status = "failed";
    const std::string what = e.what();
    summary.error = what.substr(0, what.find('\n'));  // LibTorch's errors carry a backtrace after the first line
    if (checkpoints) {
      // A save in flight holds an earlier step's whole state: let it
      // finish, so the summary can name it.
      const std::string error = checkpoints->Wait();
      if (!error.empty() && rank0) std::cerr << "llmplan: warning: " << error << std::endl;
      summary.last_checkpoint = newest_checkpoint();
    }
    complete_summary();
    try {
      log.Finish(summary);
    } catch (const std::exception& not_written) {  // the disk that failed the run, most likely
      if (rank0) std::cerr << "llmplan: warning: " << not_written.what() << std::endl;
    }
    throw;
  }
  summary.status = summary.stopped_by.empty() ? "completed" : "stopped";
  complete_summary();
  log.Finish(summary);
  watchdog.reset();  // before the communicators it watches
  return summary;
}

RunSummary TrainOnTokenFile(const TrainConfig& config, const std::string& token_path) {
  config.plan.Validate();
  TokenFileBatches data(config.plan, token_path, ReadDistributedEnv(), config.loader_workers, config.loader_prefetch);
  return Train(config, data);
}

}  // namespace llmplan::executor
