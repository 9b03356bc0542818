// llmplan run: trains a plan with the executor, one process per GPU of the
// plan (or --cpu-ranks processes on the CPU), writing metrics to RUN_DIR.
//
//   llmplan run --plan plan.json --data tokens.bin --steps N --out RUN_DIR
//               [--cpu [--cpu-ranks N]] [--dtype bf16|fp32] [--lr X] [--no-final-weights]
//               [--ckpt-dir DIR [--ckpt-every K] [--ckpt-keep N] [--ckpt-async]]
//               [--resume | --resume-from DIR/step-NNNNNNNN | --init-from HF_DIR [--init-partial]]
//               [--overwrite] [--bad-step stop|skip] [--spike-factor F]
//               [--price DOLLARS_PER_GPU_HOUR] [--target-tokens N]
//               [--loader-workers N] [--loader-prefetch K] [--nvme-dir DIR] [--kernel-trace STEP]
//
// The plan comes from `llmplan estimate ... -o plan.json`; the token file from
// `llmplan data prepare` or any format data/token_file.h reads.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "base/format.h"
#include "base/user_error.h"
#include "data/document_index.h"
#include "data/document_pieces.h"
#include "data/loss_mask.h"
#include "data/token_file.h"
#include "executor/checkpoint/checkpoint_store.h"
#include "executor/checkpoint/manifest.h"
#include "executor/comm/distributed_env.h"
#include "executor/doctor/nccl_tuning.h"
#include "executor/launcher/launcher.h"
#include "executor/run/metrics.h"
#include "executor/run/preflight.h"
#include "executor/run/run_directory.h"
#include "executor/run/stop_request.h"
#include "executor/run/trainer.h"
#include "feedback/calibration_store.h"
#include "feedback/kernel_profile.h"
#include "feedback/prediction_check.h"
#include "planner/hardware_profile.h"
#include "planner/nvme_offload.h"
#include "planner/plan.h"
#include "planner/step_program.h"
#include "simulator/evaluate.h"
#include "tools/cli/commands.h"
#include "tools/cli/executor_commands.h"
#include "tools/cli/launch_script.h"
#include "tools/cli/option_checks.h"
#include "tools/cli/version.h"

namespace llmplan::cli {

namespace {

struct RunOptions {
  std::string plan_path;
  std::string data_path;
  int64_t steps = 0;
  std::string out;
  bool cpu = false;
  std::string dtype;  // empty: the plan's param_dtype
  std::string attention;  // empty: the plan's
  double lr = -1;     // < 0: the plan's
  int cpu_ranks = 0;  // with --cpu: local processes (Gloo ranks); 0: the plan's gpus
  bool no_learn = false;  // leave this run out of the calibration store
  bool print_launch = false;  // print the per-node commands and an sbatch script; start nothing
  std::string master_addr;    // with print_launch: node 0's host (default: this host)
  bool no_final_weights = false;
  bool overwrite = false;
  std::string bad_step = "stop";
  int64_t eval_every = -1;    // -1: not given (evaluate after the last step only)
  int64_t eval_batches = -1;  // -1: not given (as many as the file holds, at most kDefaultEvalBatches)
  // Options that are TrainConfig fields as they are (checkpoints, resume,
  // --init-from, --spike-factor) are bound to it directly.
  executor::TrainConfig train;
};

// The profile the plan names. One that is not here still trains, with
// defaults: MFU is then 0 and nothing is predicted.
HardwareProfile ProfileOrDefault(const std::string& name, bool warn) {
  try {
    return LoadHardwareProfile(name);
  } catch (const UserError& e) {
    if (warn) std::cerr << "llmplan: warning: " << e.what() << " (MFU reported as 0)\n";
    HardwareProfile p;
    p.name = name;
    return p;
  }
}

// The tokens per second per GPU the simulator predicts for the program: what
// `llmplan estimate` printed for the plan and `compare` holds the run
// against. 0 when there is nothing to predict with (no profile, or a disk the
// profile cannot price).
// --eval-batches when it is not given: the file's first 16 global
// micro-batches (fewer when it holds fewer): 16 x micro-batch x GPUs windows,
// enough that the loss of a small model moves by less than its noise between
// evaluations, and a few seconds of forward on a GPU for a 1B model.
constexpr int64_t kDefaultEvalBatches = 16;

// --eval-data, --eval-every, --eval-batches and --keep-best, checked before
// any rank starts (one line each, nothing written): the evaluation's
// micro-batches per rank, 0 when there is no evaluation.
int64_t CheckEvaluation(const RunOptions& o, executor::TrainConfig& config) {
  const bool asked = o.eval_every != -1 || o.eval_batches != -1 || config.keep_best;
  if (config.eval_data.empty()) {
    if (asked)
      throw UserError("--eval-every, --eval-batches and --keep-best need --eval-data FILE (held-out tokens: "
                      "llmplan data prepare --split makes one)");
    return 0;
  }
  if (o.eval_every == 0 || o.eval_every < -1)
    throw UserError("--eval-every must be at least 1 (evaluate after every N steps; leave it out to evaluate "
                    "after the last step only)");
  config.eval_every = o.eval_every == -1 ? o.steps : o.eval_every;
  if (o.eval_batches == 0 || o.eval_batches < -1)
    throw UserError("--eval-batches must be at least 1 (micro-batches of held-out windows per evaluation)");
  if (config.keep_best && config.ckpt_dir.empty())
    throw UserError("--keep-best keeps the checkpoint of the lowest evaluation loss: it needs --ckpt-dir DIR");
  std::error_code ec;
  if (std::filesystem::equivalent(config.eval_data, o.data_path, ec))
    std::cerr << "llmplan: warning: --eval-data is the training file itself: its loss is not held out "
                 "(llmplan data prepare --split carves a held-out file)\n";
  const data::TokenFile file(config.eval_data);
  const Plan& plan = config.plan;
  const int64_t rows = static_cast<int64_t>(plan.gpus) * plan.micro_batch;
  const int64_t fit = (file.size() - 1) / plan.seq_len / rows;
  const int64_t batches = o.eval_batches == -1 ? std::min(kDefaultEvalBatches, fit) : o.eval_batches;
  if (batches < 1 || batches > fit)
    throw UserError("--eval-data " + config.eval_data + " holds " + std::to_string(file.size()) + " tokens; " +
                    std::to_string(std::max<int64_t>(batches, 1)) + " evaluation micro-batch(es) of " +
                    std::to_string(rows) + " windows of " + std::to_string(plan.seq_len) + " tokens need " +
                    std::to_string(std::max<int64_t>(batches, 1) * rows * plan.seq_len + 1) +
                    (o.eval_batches == -1 ? ": give a larger held-out file" : ": lower --eval-batches or give a larger file"));
  const int64_t needed = batches * rows * plan.seq_len + 1;
  const int threads = static_cast<int>(std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
  if (const int64_t at = file.FindTokenAtLeast(static_cast<uint32_t>(plan.model.vocab), needed, threads); at >= 0)
    throw UserError("--eval-data " + config.eval_data + " holds token id " + std::to_string(file.Token(at)) +
                    " (token " + std::to_string(at) + "), outside the model's vocabulary of " +
                    std::to_string(plan.model.vocab) + ": it was made with another tokenizer; prepare it with the "
                    "training data's");
  return batches;
}

// --attention documents (or a plan that says so), checked before any rank
// starts: the data's document index (and the held-out file's) must exist and
// fit; the plan's document_attention_work becomes this data's, which the
// note states with the documents longer than the window (cut across
// windows, each piece attending within itself).
void CheckDocumentAttention(const RunOptions& o, executor::TrainConfig& config, bool print) {
  Plan& plan = config.plan;
  if (plan.attention != AttentionSpan::kDocuments) return;
  auto open = [&](const std::string& path, const char* flag) {
    const data::TokenFile file(path);
    const std::string index = data::DocumentIndexPathFor(path);
    if (!std::filesystem::exists(index))
      throw UserError(std::string(flag) + " " + path + " has no document index (" + index +
                      ") for --attention documents: prepare it with llmplan data prepare, or train with "
                      "--attention window");
    return std::make_unique<data::DocumentIndex>(index, file.size());
  };
  const auto index = open(o.data_path, "--data");
  if (index->tokens() <= plan.seq_len)
    throw UserError("--data " + o.data_path + " holds " + std::to_string(index->tokens()) +
                    " tokens, not one window of " + std::to_string(plan.seq_len) + " + 1");
  if (!config.eval_data.empty()) open(config.eval_data, "--eval-data");
  const data::DocumentPieces pieces = data::CountDocumentPieces(*index, plan.seq_len);
  plan.document_attention_work = pieces.attention_work;
  if (!print) return;
  std::printf("llmplan: note: attention kept inside each of %s documents: %s pieces in %s windows of %s tokens "
              "(%.0f tokens each on average), %.1f%% of whole-window attention",
              FormatCount(index->documents()).c_str(), FormatCount(pieces.pieces).c_str(),
              FormatCount(pieces.windows).c_str(), FormatCount(plan.seq_len).c_str(), pieces.mean_piece_tokens,
              100.0 * pieces.attention_work);
  if (pieces.longer_than_window > 0)
    std::printf("; %s documents are longer than the window and are split across windows",
                FormatCount(pieces.longer_than_window).c_str());
  std::printf("\n");
}

double PredictedTokensPerSecondPerGpu(const Plan& plan, const HardwareProfile& profile, const StepProgram& program) {
  if (profile.bf16_peak_flops <= 0) return 0;
  if (plan.OptimizerStateOnNvme() && !HasNvmeRates(profile)) return 0;
  return EvaluateProgram(plan, profile, program).tokens_per_second_per_gpu;
}

// The tokens/s per GPU the program predicts once the host's AdamW is known
// (TrainConfig::predict_at_host_adam): the profile's CPU AdamW rates scaled
// until the simulated CPU optimizer ops take the seconds the run measured —
// the simulation slows them beside the copies, so the scale is found by
// simulating, a few times over, not by dividing once. Seconds under a
// twentieth of the simulated ones are a step whose update did no work (a
// run's first, which has no earlier step's update to apply): 0. Empty without offload.
std::function<double(double)> HostAdamPrediction(const Plan& plan, const HardwareProfile& profile,
                                                 const StepProgram& program) {
  if (profile.bf16_peak_flops <= 0 || !OffloadsOptimizer(plan.offload)) return {};
  return [plan, profile, program](double measured_s) {
    HardwareProfile p = profile;
    Estimate e = EvaluateProgram(plan, p, program);
    for (int i = 0; i < 3; ++i) {
      double simulated_s = 0;
      for (const auto& [stream, seconds] : e.time.stream_busy)
        if (stream == "cpu") simulated_s = seconds;
      if (!(simulated_s > 0) || (i == 0 && measured_s < simulated_s / 20)) return 0.0;
      const double scale = simulated_s / measured_s;
      if (std::abs(scale - 1) < 1e-3) break;
      p.cpu_adam_alone_params_per_s *= scale;
      p.cpu_adam_params_per_s *= scale;
      e = EvaluateProgram(plan, p, program);
    }
    return e.tokens_per_second_per_gpu;
  };
}

// What the run holds its step time against after the warm-up: the plan's
// profile refitted on this machine's recorded runs, else the profile itself,
// and how far it may stray (DisagreementThreshold). Empty when the profile
// is not here (nothing to predict with).
std::function<nlohmann::json(const std::string&)> PredictionCheck(const HardwareProfile& profile) {
  if (profile.bf16_peak_flops <= 0) return {};
  StoreFit fit;
  if (const std::optional<std::string> store = CalibrationStoreDir()) {
    try {
      fit = FitStore(*store, profile, ThisMachine(ThisBuild()));
    } catch (const UserError&) {
      // an unreadable store: predict with the profile as shipped
    }
  }
  const double threshold = DisagreementThreshold(fit);
  return [profile, fit, threshold](const std::string& run_dir) {
    const CalibrationRun run = PrepareCalibrationRun(LoadMeasuredRun(run_dir), profile);
    return PredictionDisagreement(CompareOnProfile(run, fit.profile ? *fit.profile : profile), threshold, run_dir,
                                  static_cast<int>(fit.used.size()));
  };
}

// Records the finished run into this machine's calibration store
// (feedback/calibration_store.h), so the next `llmplan estimate` for its
// hardware predicts with what it measured, and says so in a line or two. A
// run the store cannot use says why; nothing here fails the run.
void LearnFrom(const std::string& run_dir) {
  const std::optional<std::string> store = CalibrationStoreDir();
  if (!store) return;
  try {
    std::string entry;
    const RunAgainstStore against = RecordRun(*store, run_dir, ThisMachine(ThisBuild()), &entry);
    if (against.disagrees) {
      char line[400];
      std::snprintf(line, sizeof line,
                    "llmplan: note: this run disagrees with the %d run(s) this machine recorded: a step took %s, they "
                    "predict %s (%+.1f%%, beyond their spread of %.1f%%); recorded all the same (a fit leaves out "
                    "the runs that disagree with the rest)\n",
                    against.runs, FormatSeconds(against.measured_s).c_str(), FormatSeconds(against.predicted_s).c_str(),
                    100 * against.error, 100 * against.threshold);
      std::cout << line;
    }
    std::cout << "llmplan: note: recorded for calibration in " << entry
              << ": the next estimate on this machine uses it (--no-learn leaves a run out)\n";
  } catch (const UserError& e) {
    std::cout << "llmplan: note: not recorded for calibration: " << e.what() << "\n";
  }
}

// --print-launch: this command line as every node of the plan would run it
// (paths absolute, so they name the same files on a shared file system),
// under torchrun and under Slurm (tools/cli/launch_script.h).
void PrintLaunch(const RunOptions& o, const executor::TrainConfig& config) {
  const std::vector<std::string> self = executor::SelfArgv();
  static const std::set<std::string> kPathFlags = {"--plan",     "--data",        "--out",      "--ckpt-dir",
                                                   "--nvme-dir", "--resume-from", "--init-from"};
  std::vector<std::string> args;
  for (size_t i = 1; i < self.size(); ++i) {
    std::string arg = self[i];
    if (arg == "--print-launch") continue;
    if (arg == "--master-addr") {
      ++i;
      continue;
    }
    if (arg.rfind("--master-addr=", 0) == 0) continue;
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if (kPathFlags.count(flag) && eq != std::string::npos) {
      arg = flag + "=" + std::filesystem::absolute(arg.substr(eq + 1)).string();
    } else if (kPathFlags.count(arg) && i + 1 < self.size()) {
      args.push_back(arg);
      arg = std::filesystem::absolute(self[++i]).string();
    }
    args.push_back(arg);
  }
  LaunchRequest request;
  request.plan = config.plan;
  request.executable = std::filesystem::absolute(self[0]).string();
  request.run_args = args;
  request.master_addr = o.master_addr;
  if (request.master_addr.empty()) {
    char host[256] = "";
    ::gethostname(host, sizeof host - 1);
    request.master_addr = host[0] != '\0' ? host : "NODE0";
  }
  request.steps = o.steps;
  const HardwareProfile profile = ProfileOrDefault(config.plan.profile, /*warn=*/false);
  if (profile.bf16_peak_flops > 0) {
    const double tokens_per_s_per_gpu =
        PredictedTokensPerSecondPerGpu(config.plan, profile, BuildStepProgram(config.plan, profile));
    if (tokens_per_s_per_gpu > 0)
      request.predicted_step_s =
          static_cast<double>(config.plan.TokensPerStep()) / (tokens_per_s_per_gpu * config.plan.gpus);
  }
  std::cout << LaunchScript(request);
}

// True when the checkpoint a resume would start from is already at `steps`
// (it says so: nothing to train); throws when that checkpoint is past them.
bool AlreadyReachedItsSteps(const executor::TrainConfig& config, int64_t steps) {
  std::string from = config.resume_from;
  if (from.empty()) {
    if (std::optional<std::string> newest = checkpoint::CheckpointStore(config.ckpt_dir).Newest()) from = *newest;
  }
  if (from.empty()) {
    // Nothing to resume from: the run starts at step 0, which is what a job's
    // first submission wants, but over an earlier run's metrics it would
    // drop them all.
    std::ifstream metrics(std::filesystem::path(config.run_dir) / "metrics.jsonl");
    std::string line;
    if (metrics && std::getline(metrics, line) && !line.empty())
      throw UserError("--resume: " + config.ckpt_dir + " holds no checkpoint to resume from (see the warnings above), "
                      "but " + config.run_dir + " holds the metrics of an earlier run: starting at step 0 would drop "
                      "them; pass --overwrite instead of --resume to start again, or --resume-from a checkpoint");
    return false;
  }
  const int64_t step = checkpoint::ReadManifest(from).step;
  if (step > steps)
    throw UserError("--steps " + std::to_string(steps) + " is below the step of the checkpoint to resume from (" +
                    std::to_string(step) + ", " + from + "): --steps is the run's total, so pass --steps " +
                    std::to_string(step) + " or more");
  if (step < steps) return false;
  std::cout << "llmplan: the run already reached step " << steps << " (" << from
            << "); nothing to train and every file left as it was: pass a larger --steps to train further"
            << std::endl;
  return true;
}

void RunCommand(const RunOptions& o) {
  executor::TrainConfig config = o.train;
  config.plan = LoadPlan(o.plan_path);
  if (!o.dtype.empty()) config.plan.param_dtype = ParseDType(o.dtype);
  if (!o.attention.empty()) config.plan.attention = ParseAttentionSpan(o.attention);
  if (o.lr >= 0) {
    if (!(o.lr > 0 && o.lr < 1)) throw UserError("--lr must be in (0, 1), got " + std::to_string(o.lr));
    config.plan.optimizer.lr = o.lr;
  }
  if (o.steps < 1) throw UserError("--steps must be at least 1");
  if (config.kernel_trace_step > o.steps)
    throw UserError("--kernel-trace " + std::to_string(config.kernel_trace_step) + " is after the last step (--steps " +
                    std::to_string(o.steps) + ")");
  if (!config.nvme_dir.empty() && !config.plan.OptimizerStateOnNvme())
    throw UserError("--nvme-dir is for plans that keep AdamW's state on NVMe, and this one keeps it " +
                    std::string(OffloadsOptimizer(config.plan.offload) ? "in host memory" : "on the GPU") +
                    " (llmplan estimate --offload optimizer --offload-to nvme makes one)");
  config.steps = o.steps;
  const int64_t eval_batches = CheckEvaluation(o, config);
  CheckDocumentAttention(o, config, executor::ReadDistributedEnv().rank == 0);
  // A loss mask beside the data (data prepare --chat) changes what is
  // trained: say so, with how much, before anything starts.
  // The plan's trained_fraction becomes the mask's (what the head's
  // prediction is scaled by), on every rank alike; 1 without one.
  const std::optional<double> share = data::TrainedShareOf(o.data_path);
  // (A mask that trains nothing is priced as the least share a plan holds.)
  config.plan.trained_fraction = share ? std::max(*share, 1e-12) : 1.0;
  if (share && executor::ReadDistributedEnv().rank == 0)
    std::printf("llmplan: note: training with the loss mask %s: %.1f%% of the tokens are trained targets\n",
                data::LossMaskPathFor(o.data_path).c_str(), 100.0 * *share);
  config.run_dir = o.out;
  config.device = o.cpu ? "cpu" : "cuda";  // cuda:LOCAL_RANK when several processes run
  config.progress = true;
  config.final_weights = !o.no_final_weights;
  config.bad_step.action = executor::ParseBadStepAction(o.bad_step);
  const bool resuming = config.resume || !config.resume_from.empty();
  if (o.overwrite && resuming)
    throw UserError("--overwrite replaces the earlier run and --resume continues it: pass one of them");
  if ((config.ckpt_every > 0 || config.ckpt_async || config.resume) && config.ckpt_dir.empty())
    throw UserError("--ckpt-every, --ckpt-async and --resume need --ckpt-dir DIR (where checkpoints go)");
  config.run_dir_mode = resuming                            ? executor::RunDirectoryMode::kResume
                        : o.overwrite                       ? executor::RunDirectoryMode::kOverwrite
                                                            : executor::RunDirectoryMode::kNew;
  if (o.print_launch) {
    if (o.cpu) throw UserError("--print-launch prints GPU launch commands: drop --cpu");
    return PrintLaunch(o, config);
  }
  if (!o.master_addr.empty()) throw UserError("--master-addr goes with --print-launch");
  // A run resumed at or past its last step: decided before any file of the
  // run is opened, so its summary and metrics stay exactly as they are.
  if (resuming && AlreadyReachedItsSteps(config, o.steps)) return;
  // Checked here too (before any rank starts), so a refused --out is one line.
  executor::CheckRunDirectory(config.run_dir, config.run_dir_mode);
  if (o.cpu_ranks > 0 && !o.cpu) throw UserError("--cpu-ranks needs --cpu (on GPUs, one rank per planned GPU starts)");
  const int local_ranks = o.cpu && o.cpu_ranks > 0 ? o.cpu_ranks : config.plan.gpus;
  if (local_ranks != config.plan.gpus) {
    throw UserError("--cpu-ranks " + std::to_string(local_ranks) + " differs from the plan's " +
                    std::to_string(config.plan.gpus) + " GPUs (one rank per planned GPU)");
  }
  // Each CPU rank is a LibTorch process training its shard on the cores it
  // shares with the others: past a few per core a run only thrashes (and a
  // thousand of them would take the machine down before the first step).
  if (o.cpu && !executor::UnderExternalLauncher()) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int most = std::max(8, 4 * cores);
    if (local_ranks > most)
      throw UserError("the plan is for " + std::to_string(local_ranks) + " GPUs, and --cpu starts one process per "
                      "GPU: this machine has " + std::to_string(cores) + " cores, enough for at most " +
                      std::to_string(most) + " CPU ranks; plan for fewer (llmplan estimate --gpu cpu --gpus N)");
  }
  // One process per local GPU (or CPU rank), unless torchrun or Slurm already
  // started one per rank: then this process is that rank.
  const bool launches_ranks = local_ranks > 1 && !executor::UnderExternalLauncher();
  const bool rank0 = !launches_ranks && executor::ReadDistributedEnv().rank == 0;

  // The run's one step program, built here from the plan and its profile
  // and handed down: the executor runs it, the simulator predicts it.
  config.plan.Validate();
  config.profile = ProfileOrDefault(config.plan.profile, /*warn=*/rank0);
  config.program = BuildStepProgram(config.plan, config.profile);
  if (eval_batches > 0)
    config.eval_program = BuildEvaluationProgram(config.plan, config.profile, static_cast<int>(eval_batches));
  // The profile's NCCL settings (doctor --tune), unless the user set them:
  // before any rank starts, so every rank's NCCL reads the same.
  if (!o.cpu) {
    const std::vector<std::string> nccl = executor::ApplyNcclSettings(
        config.profile, [](const char* name) { return std::getenv(name); },
        [](const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 1); });
    if (rank0 || launches_ranks)
      for (const std::string& line : nccl) std::cout << "llmplan: note: " << line << "\n";
  }
  if (config.plan.OptimizerStateOnNvme())
    executor::CheckNvmeDirectory(config.program, config.nvme_dir,
                                 o.cpu && o.cpu_ranks > 0 ? o.cpu_ranks : config.plan.GpusOnNode());
  if (launches_ranks) {
    if (!o.cpu && config.plan.gpus > config.plan.gpus_per_node) {
      throw UserError("the plan spans " + std::to_string(config.plan.gpus) +
                      " GPUs on several nodes: start one `llmplan run` per GPU with torchrun or srun");
    }
    // This process is llmplan-executor (llmplan exec'd it), so the ranks the
    // launcher starts are too: they re-run this command line as this binary.
    executor::LaunchSpec spec;
    spec.argv = executor::SelfArgv();
    spec.nprocs = local_ranks;
    spec.cpu = o.cpu;
    std::string failure;
    const auto launched = std::filesystem::file_time_type::clock::now();
    if (const int rc = executor::LaunchLocalRanks(spec, &failure); rc != 0) {  // it printed why
      executor::AmendFailedSummary(config.run_dir, config.ckpt_dir, failure, launched);  // the cause, not rank 0's view of it
      std::exit(rc);
    }
    return;
  }
  if (rank0) {
    config.predicted_tokens_per_s_per_gpu = PredictedTokensPerSecondPerGpu(config.plan, config.profile, config.program);
    if (eval_batches > 0 && config.predicted_tokens_per_s_per_gpu > 0) {
      const Estimate eval = EvaluateProgram(config.plan, config.profile, config.eval_program);
      config.predicted_eval_seconds = eval.time.step_seconds;
      config.predicted_eval_peak_allocated_bytes = eval.memory.peak_allocated_bytes;
    }
    config.check_prediction = PredictionCheck(config.profile);
    if (!config.plan.OptimizerStateOnNvme())  // there the disk, not the cores, may set the pace
      config.predict_at_host_adam = HostAdamPrediction(config.plan, config.profile, config.program);
  }
  config.read_kernel_trace = WriteKernelProfile;
  const executor::RunSummary summary = executor::TrainOnTokenFile(config, o.data_path);
  if (rank0 && !o.no_learn && (summary.status == "completed" || summary.status == "stopped"))
    LearnFrom(config.run_dir);
  // Stopped by a signal: the process that received it exits 128 + signal, as
  // a shell expects, so that a launcher (llmplan's own, torchrun, Slurm) and
  // the scheduler above it see a stopped job, not a finished one. Ranks that
  // stopped only because a peer was signalled exit 0.
  if (summary.status == "stopped" && executor::StopRequest::Signal() != 0)
    std::exit(128 + executor::StopRequest::Signal());
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", ExecutorCommandSummary("run"));
  run->add_option("--plan", options->plan_path, "Plan JSON (from llmplan estimate -o)")->required();
  run->add_option("--data", options->data_path, "Token file (llmplan data prepare, nanoGPT .bin, llm.c .bin)")
      ->required();
  run->add_option("--steps", options->steps, "Optimizer steps to run")->required();
  run->add_option("--out", options->out, "Run directory for metrics.jsonl, summary.json, op_times.jsonl")
      ->required();
  run->add_flag("--cpu", options->cpu, "Train on the CPU instead of CUDA GPUs");
  run->add_option("--dtype", options->dtype, "Compute dtype, overriding the plan's: bf16 or fp32");
  run->add_option("--attention", options->attention,
                  "Attention span, overriding the plan's: window (each window one sequence) or documents (each "
                  "document of a packed window on its own, positions restarting; needs the data's .docs index "
                  "from llmplan data prepare)")
      ->check(CLI::IsMember({"window", "documents"}));
  run->add_option("--lr", options->lr, "Peak learning rate, overriding the plan's")->check(LearningRate());
  run->add_flag("--no-final-weights", options->no_final_weights,
                "Skip RUN_DIR/final.safetensors (for throughput runs: an 8B model is 32 GB to gather and write)");
  run->add_option("--ckpt-dir", options->train.ckpt_dir,
                  "Checkpoint directory (every rank must see it): step-NNNNNNNN/ per checkpoint, saved atomically");
  run->add_option("--ckpt-every", options->train.ckpt_every,
                  "Save a checkpoint every K steps (0: at the end and on SIGINT/SIGTERM only)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  run->add_option("--ckpt-keep", options->train.ckpt_keep, "Complete checkpoints to keep (default 2)")->check(CLI::Range(1, 1000000));
  run->add_option("--nvme-dir", options->train.nvme_dir,
                  "Directory on a local SSD for each rank's AdamW state file (plans with offload_to nvme)");
  run->add_flag("--ckpt-async", options->train.ckpt_async,
                "Copy the state to host memory and write checkpoints in the background while training goes on");
  run->add_flag("--resume", options->train.resume,
                "Continue from the newest complete checkpoint in --ckpt-dir (start at step 0 when there is none, "
                "unless --out already holds that run's metrics: then it is an error); --steps is the total; a run "
                "that already reached --steps trains nothing and leaves its files as they were");
  run->add_option("--resume-from", options->train.resume_from, "Continue from this checkpoint directory (DIR/step-NNNNNNNN)");
  run->add_option("--init-from", options->train.init_from,
                  "Start from Hugging Face weights: a directory with model.safetensors (or its index) or one file");
  run->add_flag("--plan-changed", options->train.plan_changed,
                "Resume a checkpoint saved by a plan with another seed or sequence length (without it that is an "
                "error)");
  run->add_flag("--data-changed", options->train.data_changed,
                "Resume on another token file than the checkpoint was trained on (without it that is an error)");
  run->add_flag("--init-partial", options->train.init_partial,
                "With --init-from: load the tensors that match although the file holds others the model does not "
                "use (they are listed); without it they are an error");
  run->add_flag("--overwrite", options->overwrite, "Replace the files of an earlier run in --out");
  run->add_option("--bad-step", options->bad_step,
                  "A step whose loss or gradient norm is not finite or spikes: stop (default) or skip its update");
  run->add_option("--spike-factor", options->train.bad_step.spike_factor,
                  "A spike is this many times the mean of the last 20 good steps (default 10; 0: off)");
  run->add_option("--price", options->train.price_per_gpu_hour,
                  "Dollars per GPU-hour (per rank-hour with --cpu) for the cost so far and projected "
                  "(default: the profile's price_per_gpu_hour; 0: report GPU-hours only)")
      ->check(NumberWhere([](double v) { return v >= 0 && v <= 1e6; }, "in [0, 1000000]"));
  run->add_option("--target-tokens", options->train.target_tokens,
                  "Tokens the time and cost projection aims at (default: --steps x the plan's tokens per step)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 62));
  run->add_option("--loader-workers", options->train.loader_workers,
                  "Threads reading micro-batches from --data (default 1; at most --loader-prefetch)")
      ->check(CLI::Range(1, 256));
  run->add_option("--loader-prefetch", options->train.loader_prefetch,
                  "Micro-batches the loader reads ahead (default 4)")
      ->check(CLI::Range(1, 4096));
  run->add_option("--eval-data", options->train.eval_data,
                  "Held-out token file: its loss and perplexity, forward only, the same batches every time "
                  "(llmplan data prepare --split makes one)");
  run->add_option("--eval-every", options->eval_every,
                  "Evaluate after every N steps (and after the last; default: after the last only)");
  run->add_option("--eval-batches", options->eval_batches,
                  "Micro-batches of held-out windows per evaluation, on every GPU (default: the file's first 16, "
                  "or fewer when it holds fewer)");
  run->add_flag("--keep-best", options->train.keep_best,
                "Keep the checkpoint of the lowest evaluation loss beside the newest --ckpt-keep ones "
                "(CKPT_DIR/best.json names it; a resumed run goes on comparing against it)");
  run->add_option("--kernel-trace", options->train.kernel_trace_step,
                  "Trace step STEP (from 1) with LibTorch's profiler: RUN_DIR/kernel_trace.json (Perfetto) and "
                  "kernel_profile.json, device time per kernel class (llmplan kernels reads either)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  run->add_flag("--no-learn", options->no_learn,
                "Leave this run out of the calibration store (by default a finished run records what it measured "
                "there, and the next llmplan estimate on this machine predicts with it)");
  run->add_flag("--print-launch", options->print_launch,
                "Print how to start this run on its nodes (a torchrun command per node, and an sbatch script) "
                "and start nothing");
  run->add_option("--master-addr", options->master_addr,
                  "With --print-launch: the host of node 0, where the ranks meet (default: this host)");
  run->add_option("--cpu-ranks", options->cpu_ranks, "With --cpu: CPU processes to start (default: the plan's gpus)")
      ->check(CLI::Range(1, 1024));
  run->callback([options] { RunCommand(*options); });
}

}  // namespace llmplan::cli
