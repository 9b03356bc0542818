#include "executor/run/kernel_trace.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "executor/torch_compat.h"
#include "feedback/kernel_profile.h"

namespace llmplan::executor {

StepKernelTrace::StepKernelTrace(int64_t step, std::string run_dir, bool writer, bool cuda)
    : step_(step), run_dir_(std::move(run_dir)), active_(step > 0 && writer && !run_dir_.empty()), cuda_(cuda) {}

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
    // Read back from the file, not from Kineto's event objects (whose
    // accessors differ between LibTorch versions): one reader for llmplan's
    // traces and a PyTorch peer's, as `llmplan kernels` sums them up.
    const KernelProfile profile = SummarizeKernels(ReadDeviceEvents(trace_path));
    nlohmann::json j = KernelProfileJson(profile, /*top=*/40);
    j["step"] = step;
    j["trace"] = "kernel_trace.json";
    WriteFileAtomically((dir / "kernel_profile.json").string(), j.dump(1) + "\n", "kernel profile");
    if (progress) {
      std::ostringstream text;
      PrintKernelProfile(text, profile, /*top=*/12);
      std::cerr << "kernel trace of step " << step << " (" << trace_path << "):\n" << text.str() << std::flush;
    }
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
