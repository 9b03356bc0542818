#include "executor/run/kernel_trace.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "executor/torch_compat.h"

namespace llmplan::executor {

StepKernelTrace::StepKernelTrace(int64_t step, std::string run_dir, bool writer, bool cuda, KernelTraceReader reader)
    : step_(step),
      run_dir_(std::move(run_dir)),
      active_(step > 0 && writer && !run_dir_.empty()),
      cuda_(cuda),
      reader_(std::move(reader)) {}

void StepKernelTrace::Begin(int64_t step) {
  TORCH_CHECK(Traces(step), "kernel trace begun for step ", step, ", not the traced step ", step_);
  try {
    compat::StartKernelTrace(cuda_);
  } catch (const std::exception& e) {  // a LibTorch built without Kineto
    active_ = false;
    const std::string what = e.what();
    std::cerr << "llmplan: warning: no kernel trace of step " << step << ": " << what.substr(0, what.find('\n'))
              << std::endl;
  }
}

void StepKernelTrace::End(int64_t step, bool progress) {
  const std::filesystem::path dir(run_dir_);
  const std::string trace_path = (dir / "kernel_trace.json").string();
  try {
    // Kineto writes the file itself: into a temporary, renamed when whole.
    const std::string partial = trace_path + ".partial";
    compat::StopKernelTrace(partial);
    if (std::rename(partial.c_str(), trace_path.c_str()) != 0) throw std::runtime_error("cannot rename " + partial);
    if (reader_) reader_(step, trace_path, progress);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool no_kineto = what.find("Kineto") != std::string::npos;
    std::cerr << "llmplan: warning: kernel trace of step " << step << " not written: "
              << (no_kineto ? "this LibTorch " + compat::TorchVersion() +
                                  " was built without Kineto, the profiler that saves traces (the CUDA wheels have it)"
                            : what.substr(0, what.find('\n')))
              << std::endl;
  }
}

}  // namespace llmplan::executor
