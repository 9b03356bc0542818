// AdamW (decoupled weight decay, torch.optim.AdamW semantics) on flat fp32
// master buffers, with the warmup + cosine learning-rate schedule and global
// gradient-norm clipping of the plan's OptimizerConfig.
//
// One update per unit over its whole flat buffer: a single fused kernel on
// CUDA (fused_adamw.cu, which also writes the bf16 copy the next all-gather
// sends), a multi-threaded vectorised loop on the host when the optimizer is
// offloaded (cpu_adamw.h), otherwise a handful of in-place whole-buffer ops.
// Either way the cost is a few passes over HBM per unit, never a loop over
// hundreds of small tensors.
//
// Weight decay applies to every parameter (norm weights and biases too), as in
// torchtitan; the flat buffer does not distinguish them.
//
// The state (step count, m, v per unit) is plain data in AdamWState so a
// checkpoint can save and restore it exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/optimizer/adamw_math.h"
#include "executor/optimizer/nvme_optimizer_state.h"
#include "planner/plan.h"

namespace llmplan::executor {

// Learning rate for optimizer step `step` (0-based): linear warmup from
// lr/warmup to lr over warmup_steps, then cosine from lr down to
// lr * min_lr_ratio at decay_steps, constant after.
double LearningRateAt(const OptimizerConfig& config, int64_t step);

struct AdamWState {
  int64_t step = 0;                // optimizer steps taken (bias correction uses step + 1 next)
  std::vector<at::Tensor> exp_avg;     // m, fp32, one flat tensor per unit (empty when on NVMe)
  std::vector<at::Tensor> exp_avg_sq;  // v, fp32, one flat tensor per unit (empty when on NVMe)
  // NVMe offload: m and v live in this rank's file instead (read and written
  // through it, by the update and by checkpoints).
  std::shared_ptr<NvmeOptimizerState> nvme;
};

class AdamW {
 public:
  // `shard_numels[u]` is the length of unit u's fp32 master buffer.
  // `allow_fused` false forces the unfused whole-buffer form (tests compare
  // the two).
  // `state_on_host` puts m and v in (pinned) host memory beside an offloaded
  // master; Update then runs the CPU loop (cpu_adamw.h).
  // `nvme`, when set, holds m and v instead (NVMe offload): Update streams
  // them through it with the same CPU loop. REQUIRES state_on_host and
  // nvme's units of shard_numels' lengths.
  AdamW(const OptimizerConfig& config, const std::vector<int64_t>& shard_numels, const at::Device& device,
        bool allow_fused = true, bool state_on_host = false, std::shared_ptr<NvmeOptimizerState> nvme = nullptr);
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  const OptimizerConfig& config() const { return config_; }
  AdamWState& state() { return state_; }
  const AdamWState& state() const { return state_; }

  // The L2 norm over all gradients (sqrt of the sum of per-buffer squared
  // norms; one host sync). Then, when grad_clip > 0 and the norm exceeds it,
  // scales every gradient by grad_clip / (norm + 1e-6) in place.
  // Returns the norm before clipping.
  // REQUIRES: grads are fp32 and disjoint (padding elements zero).
  double ClipGradients(const std::vector<at::Tensor>& grads);

  // What the step interpreter uses instead, for sharded gradients whose
  // squared norm is summed across ranks in between, and whose clipping
  // factor Update applies as it reads them (no pass over the gradients):
  // sum over `grads` of their squared L2 norms, an fp32 scalar tensor on
  // their device (no host sync).
  // REQUIRES: grads non-empty, fp32, on one device.
  static at::Tensor SumOfSquares(const std::vector<at::Tensor>& grads);
  // grad_clip / (norm + 1e-6) when grad_clip > 0 and norm exceeds it, else 1.
  double ClipScale(double norm) const;

  // Learning rate of the next Update.
  double CurrentLearningRate() const { return LearningRateAt(config_, state_.step); }

  // Updates unit `unit`'s master in place with the next step's hyper-
  // parameters. Call once per unit, then FinishStep. When `compute_copy` is
  // defined it receives the updated master in its dtype (the bf16 shard the
  // next all-gather sends): on CUDA the fused kernel writes it in the same
  // pass, elsewhere it is one extra cast.
  // Where the state lives decides the path: CUDA tensors take the fused
  // kernel (one launch), host tensors the multi-threaded CPU loop (offload),
  // others the whole-buffer ATen ops.
  // The gradient is read as grad * grad_scale (clipping: ClipScale(norm)):
  // the fused kernel scales in a register, the other paths scale `grad` in
  // place first — the same fp32 products either way.
  // REQUIRES: master and grad have shard_numels[unit] elements on the device
  // the state was created on, master fp32, grad fp32 or (planner/
  // gradient_path.h; not with the state on the host) bf16, read widened;
  // compute_copy, when defined, as many elements, contiguous.
  void Update(int unit, at::Tensor& master, const at::Tensor& grad, const at::Tensor& compute_copy = at::Tensor(),
              double grad_scale = 1.0);

  // The numbers the next Update applies (this step's learning rate and bias
  // corrections), with the gradient multiplied by `grad_scale` as it is read.
  AdamWScalars NextScalars(double grad_scale = 1.0) const;
  // The offloaded update with scalars taken earlier: the interpreter takes
  // them when a step's gradients are final and applies them during the next
  // step, after FinishStep has moved the count on (step_interpreter.h).
  // REQUIRES: the state is on the host; host tensors as Update's.
  void UpdateOnHost(int unit, at::Tensor& master, const at::Tensor& grad, const at::Tensor& compute_copy,
                    const AdamWScalars& s);
  // Host threads for the offloaded update; 0 (the default): the machine's
  // hardware threads. Ranks that share a node's cores should split them —
  // two ranks each starting one thread per core would time-slice every core
  // and evict each other's cache lines on a loop that is bound by memory
  // bandwidth anyway.
  void SetCpuThreads(int threads) { cpu_threads_ = threads; }

  // Advances the step count (after every unit's Update).
  void FinishStep() { ++state_.step; }

 private:
  // Throws unless master and grad are contiguous fp32 of the unit's shard size.
  void CheckShapes(int unit, const at::Tensor& master, const at::Tensor& grad) const;

  OptimizerConfig config_;
  AdamWState state_;
  bool allow_fused_;
  bool state_on_host_;
  int cpu_threads_ = 0;
  at::Tensor step_tensor_;  // device scalar for the fused kernel's bias correction
};

}  // namespace llmplan::executor
