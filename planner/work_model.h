// WorkModel: the work of the kernels the executor launches for each op of
// the step program — GEMM FLOPs, attention FLOPs, bytes moved by memory-bound
// kernels, kernel launches — the one home of "how much work" for the step
// program (and so the cost model, the simulator and calibration).
//
// Like planner/memory_model.h it follows the executor's code: on a GPU the
// fused RMSNorm, RoPE and SwiGLU kernels (executor/model/block_kernels.h), one
// pass each, with q/k/v and gate/up as one GEMM each and the residual adds in
// the o and down GEMMs' epilogue (executor/model/llama_model.cc); on a CPU LibTorch's composite form (RMSNorm in fp32 with separate
// casts, RoPE as multiply / rotate / multiply / add, SwiGLU as silu and a
// product); on both the chunked cross-entropy that computes its gradients in the forward (so the
// head's forward does three vocabulary-sized GEMMs and its backward only
// scales and accumulates), embedding backward into a dense gradient. Each
// memory-bound kernel counts the bytes it reads and writes once.
#pragma once

#include "planner/memory_model.h"
#include "planner/step_program.h"

namespace llmplan {

// `a` for one micro-batch. `block_params` / `table_params` / `head_params`:
// the unit's parameters (its flat gradient's length).
OpWork EmbeddingForwardWork(const ActivationShape& a);
OpWork EmbeddingBackwardWork(const ActivationShape& a, double table_params);
OpWork BlockForwardWork(const ActivationShape& a);
OpWork BlockBackwardWork(const ActivationShape& a, double block_params);
OpWork HeadForwardWork(const ActivationShape& a);
// The head of an evaluation: the final norm and the loss, no gradient.
OpWork HeadEvaluationWork(const ActivationShape& a);
OpWork HeadBackwardWork(const ActivationShape& a, double matrix_params);

}  // namespace llmplan
