// RunCost: what a run has cost so far and will cost to reach its target, as
// `llmplan run` reports it after every step and in its summary.
//
//   GPU-hours  world size x wall seconds since this invocation started / 3600,
//              plus what earlier attempts in the same run directory recorded
//              (a resumed run continues its total; see RecordedGpuHours in
//              run_directory.h). Every GPU of the job is paid for whether it
//              computes or waits, and from the process start (connecting,
//              building the model) to its end (final weights), so this is
//              wall time, not step time. On the CPU a "GPU" is a rank.
//   dollars    GPU-hours x price per GPU-hour (llmplan run --price, else the
//              plan's hardware profile's price_per_gpu_hour); no price: no
//              dollar figures.
//   projection to target_tokens (llmplan run --target-tokens, else --steps x
//              the plan's tokens per step): the steps still to run at the
//              pace measured so far, as wall time (eta) and as GPU-hours and
//              dollars spent by then. The pace is wall seconds per step since
//              the end of this invocation's first step (which pays for warm-up),
//              so checkpoint saves and logging between steps are in it.
//
// This header is free of LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace llmplan::executor {

struct CostSnapshot {
  double gpu_hours = 0;           // spent so far, earlier attempts included
  double price_per_gpu_hour = 0;  // USD; 0: unknown (report no dollars)
  int64_t target_tokens = 0;
  int64_t tokens_done = 0;        // optimizer steps taken (earlier attempts' too) x tokens per step
  double eta_s = 0;               // wall seconds until target_tokens at the measured pace (0: reached)
  double projected_gpu_hours = 0; // gpu_hours + world x eta_s / 3600

  bool priced() const { return price_per_gpu_hour > 0; }
  double usd() const { return gpu_hours * price_per_gpu_hour; }
  double projected_usd() const { return projected_gpu_hours * price_per_gpu_hour; }
};

class CostMeter {
 public:
  // REQUIRES: world >= 1, earlier_gpu_hours >= 0, price_per_gpu_hour >= 0,
  // tokens_per_step >= 1, target_tokens >= 1.
  CostMeter(int world, double earlier_gpu_hours, double price_per_gpu_hour, int64_t tokens_per_step,
            int64_t target_tokens);

  // After a step: `steps_taken` optimizer steps in all (earlier attempts'
  // included), `elapsed_s` wall seconds since this invocation started,
  // `step_s` this step's wall time (the pace until a second step ends).
  // REQUIRES: steps_taken grows by one per call.
  CostSnapshot StepDone(int64_t steps_taken, double elapsed_s, double step_s);

  // The cost at `elapsed_s` with `steps_taken` steps done, at the pace
  // measured so far (the summary's: the run's end comes after its last step).
  CostSnapshot At(int64_t steps_taken, double elapsed_s) const;

  double earlier_gpu_hours() const { return earlier_gpu_hours_; }

 private:
  int world_;
  double earlier_gpu_hours_, price_;
  int64_t tokens_per_step_, target_tokens_;
  int64_t steps_here_ = 0;                 // steps this invocation ran
  double first_end_s_ = 0, first_step_s_ = 0;  // when its first step ended, and how long it took
  double last_end_s_ = 0;
};

// Adds c's fields to a metrics line or the summary: gpu_hours, tokens_done,
// target_tokens, eta_s, projected_gpu_hours and, only when priced,
// price_per_gpu_hour, cost_usd and projected_cost_usd (no price: no dollar
// figures, rather than zeros a reader could take for free).
void AddCostJson(const CostSnapshot& c, nlohmann::json& j);

// For the progress line, `unit` what a GPU is ("GPU" or "rank"):
// "0.412 GPU-h $1.44  eta 1.0 h -> $28.70" or, unpriced,
// "0.0041 rank-h  eta 9.00 s -> 0.0123 rank-h".
std::string CostProgressText(const CostSnapshot& c, const std::string& unit);

// For the summary: "cost: 0.412 GPU-h, $1.44 at $3.50/GPU-h (0.200 GPU-h
// of them by earlier attempts)" and, when the target is not reached,
// "; to 5242880 tokens: eta 1.0 h, 8.20 GPU-h, $28.70".
std::string CostSummaryText(const CostSnapshot& c, double earlier_gpu_hours, const std::string& unit);

}  // namespace llmplan::executor
