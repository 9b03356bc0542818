// BadStepMonitor: tells a diverging step from a normal one, so a run stops
// (or skips the step) instead of training on — or ending with exit 0 — after
// its loss jumped from 6.4 to 2,150.
//
// A step is bad when its loss or its gradient norm (before clipping) is not
// finite, or when either exceeds `spike_factor` times its mean over the last
// 20 good steps (judged only once 10 good steps are known: early training's
// norms move too much to compare). The gradient norm is on the host before
// any parameter changes (the interpreter's update gate), so a step whose
// norm is bad can be skipped; the loss is known only after the update, so a
// loss spike with a normal norm can stop the run but not be undone.
#pragma once

#include <deque>
#include <string>

namespace llmplan::executor {

enum class BadStepAction {
  kStop,  // end the run with an error (the last checkpoint holds the state before it)
  kSkip,  // skip the update when the gradient norm is bad; warn and go on otherwise
};

struct BadStepPolicy {
  BadStepAction action = BadStepAction::kStop;
  double spike_factor = 10;  // 0: only non-finite values are bad
};

// "stop" / "skip". Throws UserError for anything else.
BadStepAction ParseBadStepAction(const std::string& text);

class BadStepMonitor {
 public:
  explicit BadStepMonitor(BadStepPolicy policy);

  const BadStepPolicy& policy() const { return policy_; }
  // Whether a gradient norm is acceptable (the update gate).
  bool GradNormIsGood(double grad_norm) const;
  // Judges a finished step: "" when it was good (it then joins the history),
  // else what was wrong, e.g. "loss 2150 is 336x the mean 6.4 of the last 20 steps".
  std::string Judge(double loss, double grad_norm);

 private:
  std::string Check(const char* what, double value, const std::deque<double>& history) const;

  BadStepPolicy policy_;
  std::deque<double> losses_, norms_;  // the last good steps'
};

}  // namespace llmplan::executor
