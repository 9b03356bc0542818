#include "executor/run/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/user_error.h"
#include "planner/step_trace.h"
#include "executor/checkpoint/checkpoint_store.h"

namespace llmplan::executor {

MetricsLog::MetricsLog(const std::string& run_dir, int64_t total_steps, bool progress, std::string per_device,
                       bool append)
    : run_dir_(run_dir),
      total_steps_(total_steps),
      progress_(progress),
      terminal_(isatty(STDOUT_FILENO) != 0),
      per_device_(std::move(per_device)) {
  if (run_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(run_dir_, ec);
  if (ec) throw UserError("cannot create run directory " + run_dir_ + ": " + ec.message());
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC);
  metrics_fd_ = ::open((run_dir_ + "/metrics.jsonl").c_str(), flags, 0644);
  op_times_fd_ = ::open((run_dir_ + "/op_times.jsonl").c_str(), flags, 0644);
  if (metrics_fd_ < 0 || op_times_fd_ < 0) {
    const std::string why = std::strerror(errno);
    if (metrics_fd_ >= 0) ::close(metrics_fd_);
    if (op_times_fd_ >= 0) ::close(op_times_fd_);
    throw UserError("cannot write to run directory " + run_dir_ + " (" + why + "): check --out and its permissions");
  }
}

MetricsLog::~MetricsLog() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
  if (op_times_fd_ >= 0) ::close(op_times_fd_);
}

void MetricsLog::AppendLine(int fd, const std::string& name, const std::string& line, int64_t step) {
  const std::string text = line + "\n";
  struct stat st;
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "nothing written";
      // A torn line would be the file's last: cut it off, so the file holds
      // whole steps (a resumed run keeps them) and what is lost is this step.
      if (done > 0 && before >= 0) (void)!::ftruncate(fd, before);
      throw UserError("writing " + run_dir_ + "/" + name + " failed at step " + std::to_string(step) + " (" + why +
                      "): free space in " + run_dir_ + ", then continue with --resume from the last checkpoint");
    }
    done += static_cast<size_t>(n);
  }
}

void MetricsLog::WritePlanAndProgram(const Plan& plan, const StepProgram& program) {
  if (run_dir_.empty()) return;
  SavePlan(plan, run_dir_ + "/plan.json");
  WriteFileAtomically(run_dir_ + "/program.json", StepProgramJson(program).dump(1) + "\n", "step program");
}

void MetricsLog::WriteTrace(const StepProgram& program, const StepMeasurement& measurement) {
  if (run_dir_.empty()) return;
  std::vector<OpTiming> spans;
  std::vector<MemorySample> memory;
  for (const OpMeasurement& o : measurement.ops) {
    spans.push_back({o.start_s, o.end_s});
    if (o.measured) memory.push_back({o.issued_s, static_cast<double>(o.allocated)});
  }
  StepTrace(program, spans, memory, /*pid=*/2, "measured").Write(run_dir_ + "/trace.json");
}

void MetricsLog::LogStep(const StepMetrics& m, const StepMeasurement& measurement) {
  if (!run_dir_.empty()) {
    nlohmann::json j = {{"step", m.step},
                        {"loss", m.loss},
                        {"lr", m.lr},
                        {"grad_norm", m.grad_norm},
                        {"update_skipped", m.update_skipped},
                        {"kernel_traced", m.kernel_traced},
                        {"tokens_per_s", m.tokens_per_s},
                        {"tokens_per_s_per_gpu", m.tokens_per_s_per_gpu},
                        {"mfu", m.mfu},
                        {"hfu", m.hfu},
                        {"peak_allocated_bytes", m.peak_allocated_bytes},
                        {"peak_reserved_bytes", m.peak_reserved_bytes},
                        {"memory_source", m.memory_source},
                        {"data_s", m.data_s},
                        {"forward_s", m.forward_s},
                        {"recompute_s", m.recompute_s},
                        {"backward_s", m.backward_s},
                        {"optimizer_s", m.optimizer_s},
                        {"comm_s", m.comm_s},
                        {"step_s", m.step_s},
                        {"run_s", m.run_s},
                        {"all_issued_s", m.all_issued_s},
                        {"synced_s", m.synced_s},
                        {"read_s", m.read_s},
                        {"returned_s", m.returned_s},
                        {"data_position", m.data_position},
                        {"host_anon_rss_bytes", m.host_anon_rss_bytes},
                        {"pinned_host_bytes", m.pinned_host_bytes}};
    if (m.predicted_tokens_per_s_per_gpu > 0) j["predicted_tokens_per_s_per_gpu"] = m.predicted_tokens_per_s_per_gpu;
    if (m.predicted_at_host_adam_tokens_per_s_per_gpu > 0)
      j["predicted_at_host_adam_tokens_per_s_per_gpu"] = m.predicted_at_host_adam_tokens_per_s_per_gpu;
    if (m.cost.target_tokens > 0) AddCostJson(m.cost, j);
    if (m.evaluation) {
      const EvaluationRow& e = *m.evaluation;
      j["eval_loss"] = e.loss;
      j["eval_perplexity"] = e.perplexity;
      j["eval_tokens"] = e.tokens;
      j["eval_s"] = e.seconds;
      j["eval_peak_allocated_bytes"] = e.peak_allocated_bytes;
      if (e.predicted_seconds > 0) j["predicted_eval_s"] = e.predicted_seconds;
      if (e.predicted_peak_allocated_bytes > 0) j["predicted_eval_peak_allocated_bytes"] = e.predicted_peak_allocated_bytes;
      j["eval_best"] = e.best;
    }
    AppendLine(metrics_fd_, "metrics.jsonl", j.dump(), m.step);  // unbuffered: a crashed run leaves every finished step
    const size_t n = measurement.ops.size();
    std::vector<double> start(n), end(n), issued(n);
    std::vector<int64_t> allocated(n), reserved(n), peak_allocated(n), peak_reserved(n);
    for (size_t i = 0; i < n; ++i) {
      const OpMeasurement& o = measurement.ops[i];
      start[i] = o.start_s;
      end[i] = o.end_s;
      issued[i] = o.issued_s;
      allocated[i] = o.allocated;
      reserved[i] = o.reserved;
      peak_allocated[i] = o.peak_allocated;
      peak_reserved[i] = o.peak_reserved;
    }
    AppendLine(op_times_fd_, "op_times.jsonl",
               nlohmann::json{{"step", m.step},
                                {"start_s", start},
                                {"end_s", end},
                                {"issued_s", issued},
                                {"allocated", allocated},
                                {"reserved", reserved},
                                {"peak_allocated", peak_allocated},
                                {"peak_reserved", peak_reserved},
                                {"memory_source", measurement.memory_source}}
                   .dump(),
               m.step);
  }
  if (!progress_) return;
  char vs_plan[96] = "";
  if (m.predicted_tokens_per_s_per_gpu > 0 && m.predicted_at_host_adam_tokens_per_s_per_gpu > 0)
    std::snprintf(vs_plan, sizeof vs_plan, " (%.0f%% of plan, %.0f%% at its host AdamW)",
                  100.0 * m.tokens_per_s_per_gpu / m.predicted_tokens_per_s_per_gpu,
                  100.0 * m.tokens_per_s_per_gpu / m.predicted_at_host_adam_tokens_per_s_per_gpu);
  else if (m.predicted_tokens_per_s_per_gpu > 0)
    std::snprintf(vs_plan, sizeof vs_plan, " (%.0f%% of plan)", 100.0 * m.tokens_per_s_per_gpu / m.predicted_tokens_per_s_per_gpu);
  char text[352];
  std::snprintf(text, sizeof text, "step %lld/%lld  loss %.4f  lr %.3g  grad_norm %.3f  %.0f tok/s/%s%s  mfu %.1f%%  %.3fs",
                static_cast<long long>(m.step), static_cast<long long>(total_steps_), m.loss, m.lr, m.grad_norm,
                m.tokens_per_s_per_gpu, per_device_.c_str(), vs_plan, 100.0 * m.mfu, m.step_s);
  std::string line = text;
  if (m.cost.target_tokens > 0) line += "  " + CostProgressText(m.cost, per_device_);
  if (m.evaluation) {
    const EvaluationRow& e = *m.evaluation;
    char eval[160];
    std::snprintf(eval, sizeof eval, "  | eval loss %.4f  ppl %.2f  %.2fs%s", e.loss, e.perplexity, e.seconds,
                  e.best ? "  (best)" : "");
    line += eval;
  }
  if (terminal_) {
    std::cout << "\r\033[K" << line << std::flush;  // rewrite one line in place
  } else {
    std::cout << line << std::endl;  // flushed: progress is visible when logged to a file
  }
}

void MetricsLog::Finish(const RunSummary& s) {
  nlohmann::json j = {{"status", s.status},
                      {"error", s.error},
                      {"last_step", s.last_step},
                      {"steps", s.steps},
                      {"start_step", s.start_step},
                      {"resumed_from", s.resumed_from},
                      {"stopped_by", s.stopped_by},
                      {"last_checkpoint", s.last_checkpoint},
                      {"first_loss", s.first_loss},
                      {"final_loss", s.final_loss},
                      {"losses", s.losses},
                      {"mean_tokens_per_s", s.mean_tokens_per_s},
                      {"mean_tokens_per_s_per_gpu", s.mean_tokens_per_s_per_gpu},
                      {"mean_mfu", s.mean_mfu},
                      {"mean_hfu", s.mean_hfu},
                      {"peak_allocated_bytes", s.peak_allocated_bytes},
                      {"peak_reserved_bytes", s.peak_reserved_bytes},
                      {"memory_source", s.memory_source},
                      {"peak_pinned_host_bytes", s.peak_pinned_host_bytes},
                      {"peak_host_rss_bytes", s.peak_host_rss_bytes},
                      {"checkpoint_staging_bytes", s.checkpoint_staging_bytes},
                      {"total_s", s.total_s},
                      {"device", s.device},
                      {"torch_version", s.torch_version},
                      {"attention_backend", s.attention_backend}};
  if (s.cost.target_tokens > 0) AddCostJson(s.cost, j);
  j["earlier_gpu_hours"] = s.earlier_gpu_hours;
  if (s.predicted_tokens_per_s_per_gpu > 0) {
    j["predicted_tokens_per_s_per_gpu"] = s.predicted_tokens_per_s_per_gpu;
    j["tokens_per_s_per_gpu_vs_predicted"] = s.mean_tokens_per_s_per_gpu / s.predicted_tokens_per_s_per_gpu;
  }
  AddRankPeaksJson(s.rank_peaks, j);
  j["data_wait_fraction"] = s.data_wait_fraction;
  j["prediction_disagreement"] = s.prediction_disagreement;
  j["host_adam_prediction"] = s.host_adam_prediction;
  j["host_memory_growth"] = s.host_memory_growth;
  j["loader_bound_steps"] = s.loader_bound_steps;
  j["evaluation"] = s.evaluation;
  // Printed before it is written: a summary that cannot be written (a full
  // disk) is still on the terminal.
  if (progress_) Print(s);
  if (!run_dir_.empty()) WriteFileAtomically(run_dir_ + "/summary.json", j.dump(1) + "\n", "run summary");
}

void MetricsLog::Print(const RunSummary& s) {
  if (terminal_) std::cout << "\n";
  const std::string how = s.status == "failed"    ? "failed at step " + std::to_string(s.last_step) + " after"
                          : s.status == "stopped" ? "stopped by " + s.stopped_by + ":"
                                                  : "done:";
  char line[320];
  std::snprintf(line, sizeof line,
                "%s %lld steps in %.1fs  loss %.4f -> %.4f  %.0f tok/s/%s  mfu %.1f%%  hfu %.1f%%  peak %.2f GiB "
                "allocated / %.2f GiB reserved (%s)",
                how.c_str(), static_cast<long long>(s.steps), s.total_s, s.first_loss, s.final_loss, s.mean_tokens_per_s_per_gpu,
                per_device_.c_str(),
                100.0 * s.mean_mfu, 100.0 * s.mean_hfu, s.peak_allocated_bytes / 1073741824.0,
                s.peak_reserved_bytes / 1073741824.0, s.memory_source.c_str());
  std::cout << line << "\n";
  if (s.peak_pinned_host_bytes > 0)
    std::printf("host: %.2f GiB pinned for offloaded state and staging, %.2f GiB resident at peak\n",
                s.peak_pinned_host_bytes / 1073741824.0, s.peak_host_rss_bytes / 1073741824.0);
  if (s.checkpoint_staging_bytes > 0)
    std::printf("host: %.2f GiB staged for asynchronous checkpoints\n", s.checkpoint_staging_bytes / 1073741824.0);
  if (s.cost.target_tokens > 0) std::cout << CostSummaryText(s.cost, s.earlier_gpu_hours, per_device_) << "\n";
  if (s.predicted_tokens_per_s_per_gpu > 0)
    std::printf("throughput: %.0f tok/s/%s, %.0f%% of the plan's %.0f\n", s.mean_tokens_per_s_per_gpu, per_device_.c_str(),
                100.0 * s.mean_tokens_per_s_per_gpu / s.predicted_tokens_per_s_per_gpu, s.predicted_tokens_per_s_per_gpu);
  if (const std::string peaks = RankPeaksText(s.rank_peaks); !peaks.empty()) std::cout << peaks << "\n";
  if (s.loader_bound_steps > 0)
    std::printf("batches: the steps waited for them %.1f%% of their time; %lld step(s) more than a tenth of their own\n",
                100.0 * s.data_wait_fraction, static_cast<long long>(s.loader_bound_steps));
  if (s.evaluation.is_object() && s.evaluation.contains("last")) {
    const nlohmann::json& e = s.evaluation;
    std::printf("evaluation: loss %.4f (ppl %.2f) at step %lld on %lld tokens; best %.4f at step %lld%s%s\n",
                e["last"]["loss"].get<double>(), e["last"]["perplexity"].get<double>(),
                static_cast<long long>(e["last"]["step"].get<int64_t>()), static_cast<long long>(e["tokens"].get<int64_t>()),
                e["best"]["loss"].get<double>(), static_cast<long long>(e["best"]["step"].get<int64_t>()),
                e.value("best_checkpoint", std::string()).empty() ? "" : ", kept as ",
                e.value("best_checkpoint", std::string()).c_str());
  }
  if (!s.last_checkpoint.empty()) std::cout << "checkpoint: " << s.last_checkpoint << "\n";
  if (!run_dir_.empty()) std::cout << "metrics: " << run_dir_ << "/metrics.jsonl" << std::endl;
}

namespace {

// The summary the launcher writes when rank 0 wrote none for this run.
nlohmann::json LauncherSummary(const std::string& run_dir, const std::string& ckpt_dir, const std::string& error) {
  int64_t last_step = 0;
  std::ifstream metrics(std::filesystem::path(run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) last_step = j["step"].get<int64_t>();
  }
  // The newest checkpoint the error does not name (a damaged one is not
  // offered to resume from).
  std::string last_checkpoint;
  if (!ckpt_dir.empty()) {
    const checkpoint::CheckpointStore store(ckpt_dir);
    const std::vector<int64_t> steps = store.CompleteSteps();
    for (auto it = steps.rbegin(); it != steps.rend() && last_checkpoint.empty(); ++it)
      if (error.find(store.PathOf(*it)) == std::string::npos) last_checkpoint = store.PathOf(*it);
  }
  return {{"status", "failed"},         {"error", error},     {"last_step", last_step},
          {"last_checkpoint", last_checkpoint}, {"stopped_by", ""}, {"written_by", "launcher"}};
}

}  // namespace

void AmendFailedSummary(const std::string& run_dir, const std::string& ckpt_dir, const std::string& launcher_error,
                        std::filesystem::file_time_type since) {
  if (run_dir.empty() || launcher_error.empty()) return;
  const std::filesystem::path path = std::filesystem::path(run_dir) / "summary.json";
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(path, ec);
  if (ec || written < since) {
    if (!std::filesystem::is_directory(run_dir, ec)) return;  // the run never began
    try {
      WriteFileAtomically(path.string(), LauncherSummary(run_dir, ckpt_dir, launcher_error).dump(1) + "\n", "run summary");
    } catch (const UserError&) {  // a full disk: the terminal has the error
    }
    return;
  }
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("status") || j["status"] != "failed") return;
  j["rank0_error"] = j.value("error", "");
  j["error"] = launcher_error;
  try {
    WriteFileAtomically(path.string(), j.dump(1) + "\n", "run summary");
  } catch (const UserError&) {  // a full disk: rank 0's error stays
  }
}

}  // namespace llmplan::executor
