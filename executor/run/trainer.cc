// The training loop (see trainer.h): one function, Train, that reads top to
// bottom; each phase is a function or class of its own file in executor/run.
#include "executor/run/trainer.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include <ATen/ATen.h>

#include "base/format.h"
#include "base/user_error.h"
#include "executor/checkpoint/checkpoint_store.h"
#include "executor/comm/communicator.h"
#include "executor/data/batch_loader.h"
#include "executor/run/batch_source.h"
#include "executor/run/evaluation.h"
#include "executor/run/rank_setup.h"
#include "executor/run/run_checkpoints.h"
#include "executor/run/run_report.h"
#include "executor/run/stop_request.h"
#include "executor/run/training_state.h"

namespace llmplan::executor {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void CheckConfig(const TrainConfig& config) {
  const Plan& plan = config.plan;
  plan.Validate();
  const StepProgram& program = config.program;
  if (program.ops.empty() || program.gpus != plan.gpus || program.micro_batch != plan.micro_batch ||
      program.seq_len != plan.seq_len || program.micro_batches != plan.grad_accum ||
      static_cast<int64_t>(program.units.size()) != plan.model.layers + 2)
    throw std::invalid_argument("TrainConfig.program was not built from TrainConfig.plan (BuildStepProgram)");
  if (config.steps < 1) throw UserError("--steps must be at least 1");
  if ((config.resume || !config.resume_from.empty()) && !config.init_from.empty())
    throw UserError("--init-from starts a new run and --resume continues one: pass one of them");
  if (config.ckpt_every < 0 || config.ckpt_keep < 1) throw UserError("--ckpt-every must be >= 0 and --ckpt-keep >= 1");
  if (!config.eval_data.empty()) {
    if (config.eval_every < 1)
      throw UserError("--eval-every must be at least 1 (evaluate after every N steps)");
    const StepProgram& eval = config.eval_program;
    if (!eval.evaluation || eval.micro_batches < 1 || eval.micro_batch != program.micro_batch ||
        eval.seq_len != program.seq_len || eval.units.size() != program.units.size())
      throw std::invalid_argument("TrainConfig.eval_program was not built from TrainConfig.plan (BuildEvaluationProgram)");
  }
  if (config.keep_best && (config.eval_data.empty() || config.ckpt_dir.empty()))
    throw UserError("--keep-best keeps the checkpoint of the lowest evaluation loss: it needs --eval-data and --ckpt-dir");
  if (config.kernel_trace_step < 0 || config.kernel_trace_step > config.steps)
    throw UserError("--kernel-trace " + std::to_string(config.kernel_trace_step) + " is not a step of this run: give 1.." +
                    std::to_string(config.steps) + " (a step after the first, which warms the allocator up)");
}

// Every rank must stop at the same step boundary, whichever got the signal:
// one tiny all-reduce of the signal numbers (~tens of µs, once a step,
// outside the step program). A rank that received one says so here, once;
// the launcher names it again when the run has stopped.
int AgreedStopSignal(const RankSetup& rank, int64_t step) {
  const int sig = StopRequest::Signal();
  if (sig != 0 && rank.comms.world != nullptr)
    std::cerr << "llmplan: rank " << rank.env.rank << " received " << SignalName(sig) << ": every rank stops after step "
              << step << " and saves a checkpoint" << std::endl;
  if (rank.comms.world == nullptr) return sig;
  // One count per signal, so that every rank's summary names the one a peer got.
  const int kinds[] = {SIGTERM, SIGINT, SIGHUP};
  at::Tensor votes = at::zeros({3}, at::TensorOptions().dtype(at::kFloat));
  for (int i = 0; i < 3; ++i)
    if (sig == kinds[i]) votes[i] = 1;
  votes = votes.to(rank.groups.device);
  // Watched like the step's collectives: a peer that stops (SIGSTOP) while
  // this rank waits here is reported by the watchdog (exit status 3).
  std::shared_ptr<CollectiveWork> vote = rank.comms.world->AllReduce(votes, "stop vote");
  if (rank.watchdog != nullptr) rank.watchdog->Watch(vote, "stop vote", rank.comms.world->name());
  vote->Wait();
  votes = votes.to(at::kCPU);
  if (sig != 0) return sig;
  for (int i = 0; i < 3; ++i)
    if (votes[i].item<float>() > 0) return kinds[i];
  return 0;
}

// A diverging step (bad_step.h) under kStop, or a loss that is not finite
// whose update was applied anyway, ends the run; under kSkip it is a warning.
void JudgeStep(BadStepMonitor& bad_steps, const StepResult& r, int64_t step, const RankSetup& rank,
               const RunCheckpoints& checkpoints) {
  const std::string bad = bad_steps.Judge(r.loss, r.grad_norm);
  if (bad.empty()) return;
  const std::string where = "step " + std::to_string(step) + ": " + bad;
  if (bad_steps.policy().action == BadStepAction::kStop || (!std::isfinite(r.loss) && !r.update_skipped)) {
    const std::string last = checkpoints.Newest();
    throw std::runtime_error(where + ": training diverged; stopped before saving this state" +
                             (last.empty() ? std::string() : " (the last checkpoint is " + last + ")") +
                             ": lower --lr or raise warmup_steps, or pass --bad-step skip");
  }
  if (rank.rank0)
    std::cerr << "llmplan: warning: " << where
              << (r.update_skipped ? ": its update was skipped" : ": its update was applied (a loss is known only after it)")
              << std::endl;
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
    options_.document_attention = plan.attention == AttentionSpan::kDocuments;
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

}  // namespace

RunSummary Train(const TrainConfig& config, BatchSource& data) {
  CheckConfig(config);
  const auto run_start = Clock::now();
  // --- the rank: its place, device, checks, run directory, checkpoint to resume; then its communicators ---
  RankSetup rank = PrepareRank(config);
  ConnectRanks(config, rank);
  // SIGINT/SIGTERM/SIGHUP from here on: stop at the next step boundary. Not
  // while the ranks connect: a signal then (a peer that never comes) ends
  // the process at once, with nothing yet to save, instead of waiting out
  // the rendezvous timeout.
  StopRequest stop_request;
  // --- the model, its sharded units, the optimizer and the step interpreter ---
  TrainingState state(config, rank, data);
  BadStepMonitor bad_steps(config.bad_step);
  if (config.bad_step.action == BadStepAction::kSkip)  // asked before each update
    state.step().SetUpdateGate([&](double grad_norm) { return bad_steps.GradNormIsGood(grad_norm); });
  // --- what the run keeps: checkpoints, metrics and summary, a kernel trace ---
  RunCheckpoints checkpoints(config, rank, state);
  RunReport report(config, rank, state, run_start);
  RunEvaluation evaluation(config, rank, state.start_step());
  StepKernelTrace kernel_trace(config.kernel_trace_step, config.run_dir, rank.rank0, rank.device.is_cuda(),
                               config.read_kernel_trace);

  // A failure from here on (a step's UserError, out of memory, the token file
  // truncated under the loader, a full disk) still leaves summary.json with
  // status "failed"; the exception then goes on to the caller.
  try {
    // --- the steps ---
    for (int64_t taken = state.start_step(); taken < config.steps; ++taken) {
      const int64_t step = taken + 1;  // as the console and metrics.jsonl count it
      const auto step_start = Clock::now();
      std::vector<at::Tensor> micro_batches;
      for (int64_t mb = 0; mb < config.plan.grad_accum; ++mb) micro_batches.push_back(data.Next());
      StepTiming timing;
      timing.data_s = SecondsSince(step_start);
      if (kernel_trace.Traces(step)) kernel_trace.Begin(step);
      const auto run_call = Clock::now();
      const StepResult result = state.step().Run(micro_batches);  // returns after the device finished the step
      timing.run_s = SecondsSince(run_call);
      if (kernel_trace.Traces(step)) kernel_trace.End(step, config.progress);
      timing.step_s = SecondsSince(step_start);
      timing.kernel_traced = kernel_trace.IsTracedStep(step);
      JudgeStep(bad_steps, result, step, rank, checkpoints);
      // --- the held-out loss; a new best's checkpoint saved before best.json names it ---
      std::optional<EvaluationRow> evaluated;
      if (evaluation.Due(step)) {
        evaluated = evaluation.Evaluate(state.step(), step);
        if (evaluated->best && evaluation.keeps_best())
          checkpoints.Save(step, data.position(), checkpoint::BestCheckpoint{step, evaluated->loss});
      }
      report.Step(result, timing, state.steps_taken(), data.position(), evaluated, evaluation.best());
      if (step == config.steps) report.WriteTrace(state.step().program(), result.measurement);
      if (const int sig = AgreedStopSignal(rank, step); sig != 0) {
        report.Stopped(sig);
        checkpoints.Save(step, data.position());
        break;
      }
      if (config.ckpt_every > 0 && step % config.ckpt_every == 0) checkpoints.Save(step, data.position());
    }
    // --- the end: the last offloaded update, a checkpoint to continue from, the trained model ---
    state.step().FinishUpdate();
    if (!report.stopped()) checkpoints.Save(state.steps_taken(), data.position());
    const std::string last_checkpoint = checkpoints.Finish();
    if (!config.run_dir.empty() && config.final_weights && !report.stopped())
      state.WriteFinalWeights(rank, (std::filesystem::path(config.run_dir) / "final.safetensors").string());
    return report.Complete(last_checkpoint, checkpoints.staging_bytes());
  } catch (const CollectiveError& e) {
    // A peer's connection closed: name the rank that stopped, which under
    // torchrun or srun nothing else does (peer_liveness.h).
    const std::string who = rank.liveness ? rank.liveness->Culprits() : "";
    const CollectiveError named(who.empty() ? std::string(e.what()) : std::string(e.what()) + "; " + who);
    report.Fail(named, checkpoints.Finish(), checkpoints.staging_bytes());
    throw named;
  } catch (const std::exception& e) {
    // A save in flight holds an earlier step's whole state: let it finish,
    // so the summary can name it.
    report.Fail(e, checkpoints.Finish(), checkpoints.staging_bytes());
    throw;
  }
}

RunSummary TrainOnTokenFile(const TrainConfig& config, const std::string& token_path) {
  config.plan.Validate();
  TokenFileBatches data(config.plan, token_path, ReadDistributedEnv(), config.loader_workers, config.loader_prefetch);
  TrainConfig on_file = config;
  on_file.data = checkpoint::IdentifyDataFile(token_path);
  return Train(on_file, data);
}

}  // namespace llmplan::executor
