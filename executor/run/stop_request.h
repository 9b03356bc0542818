// StopRequest: SIGINT, SIGTERM and SIGHUP turned into "stop at the next step
// boundary" while a run trains, so a checkpoint can be saved and the summary
// written instead of the process dying mid-step. (Schedulers send SIGTERM
// before they kill a job: Slurm's --signal, Kubernetes' grace period.)
//
// A second signal of either kind restores the default action and re-raises
// it: a user who presses Ctrl-C twice gets the process killed at once.
//
// Installed for the lifetime of the object; the previous handlers come back
// on destruction. Not nestable (one per process).
#pragma once

namespace llmplan::executor {

class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;

  // The signal number this process received (SIGINT, SIGTERM, SIGHUP), or 0.
  // It stays set after the StopRequest is gone, so the process can exit with
  // 128 + that signal.
  static int Signal();
};

}  // namespace llmplan::executor
