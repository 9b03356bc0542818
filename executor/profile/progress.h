// ProfileProgress: what `llmplan profile` shows on stderr while it measures.
// One line per measurement, saying what it measures and about how long the
// whole profile has left; on a terminal, a bar under it rewritten in place
// (\r) as the measurement's items complete. The time left starts from each
// stage's estimate and is scaled by how the stages done so far compared with
// theirs (a slower machine, or a shared one, stretches every stage alike).
#pragma once

#include <chrono>
#include <ostream>
#include <string>
#include <vector>

namespace llmplan::executor {

class ProfileProgress {
 public:
  struct Stage {
    std::string what;        // "bf16 GEMMs: 60 shapes of 4 models"
    double estimated_s = 1;  // before anything ran
  };

  // `terminal`: `out` is a terminal (draw the bar).
  ProfileProgress(std::ostream& out, bool terminal, std::vector<Stage> stages);
  ProfileProgress(const ProfileProgress&) = delete;
  ProfileProgress& operator=(const ProfileProgress&) = delete;

  // Starts stage `index` (in order): prints its line with the time left.
  // REQUIRES: index < number of stages; the previous stage has ended.
  void Begin(size_t index);
  // `done` of `total` items of the current stage are complete (redraws the bar).
  void Items(int done, int total);
  // Ends the current stage: `note` ("795 TFLOP/s at 8192^3") goes after its time.
  void End(const std::string& note = "");

  // "2 min 05 s", "14 s", "0.4 s".
  static std::string Duration(double seconds);

 private:
  double SecondsLeft(double fraction_of_current) const;

  std::ostream& out_;
  const bool terminal_;
  const std::vector<Stage> stages_;
  std::chrono::steady_clock::time_point stage_start_;
  size_t current_ = 0;
  double estimated_done_ = 0;  // estimates of the stages already ended
  double actual_done_ = 0;     // their measured seconds
  bool bar_drawn_ = false;
};

}  // namespace llmplan::executor
