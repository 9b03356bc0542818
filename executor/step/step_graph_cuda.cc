// StepGraph (see step_graph.h), on LibTorch's at::cuda::CUDAGraph: it owns
// the capture, the graph's private pool in the caching allocator and the
// instantiated graph.
#include "executor/step/step_graph.h"

#include <string>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include "base/user_error.h"

namespace llmplan::executor {

struct StepGraph::Impl {
  explicit Impl(const at::Device& d) : device(d), side(c10::cuda::getStreamFromPool(false, d.index())) {}
  at::Device device;
  c10::cuda::CUDAStream side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;  // never moved: it owns the capture's pool
  bool captured = false;
};

StepGraph::StepGraph(const at::Device& device) : impl_(std::make_unique<Impl>(device)) {}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return impl_->captured; }

void StepGraph::Capture(const std::function<void()>& issue) {
  TORCH_CHECK(!impl_->captured, "StepGraph::Capture: the step is captured already");
  const c10::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream(impl_->device.index());
  // The side stream starts after the work queued so far (not part of the
  // graph: at replay the graph runs in the current stream's order anyway).
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(impl_->side);
  impl_->graph = std::make_unique<at::cuda::CUDAGraph>();
  c10::cuda::CUDAStreamGuard on_side(impl_->side);
  impl_->graph->capture_begin();
  try {
    issue();
  } catch (...) {
    // The stream must leave capture mode whatever failed, or every later
    // CUDA call on it fails too; the half-made graph is dropped.
    try {
      impl_->graph->capture_end();
    } catch (...) {
    }
    impl_->graph.reset();
    throw;
  }
  try {
    impl_->graph->capture_end();
  } catch (const c10::Error& e) {
    impl_->graph.reset();
    throw UserError(std::string("capturing the step as a CUDA graph failed (") + e.what_without_backtrace() +
                    "): plan again without it (llmplan estimate ... --cuda-graph no)");
  }
  impl_->captured = true;
}

void StepGraph::Replay() {
  TORCH_CHECK(impl_->captured, "StepGraph::Replay before Capture");
  impl_->graph->replay();
}

}  // namespace llmplan::executor
