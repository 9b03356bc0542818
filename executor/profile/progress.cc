// ProfileProgress (see progress.h).
#include "executor/profile/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace llmplan::executor {

ProfileProgress::ProfileProgress(std::ostream& out, bool terminal, std::vector<Stage> stages)
    : out_(out), terminal_(terminal), stages_(std::move(stages)) {}

std::string ProfileProgress::Duration(double seconds) {
  char text[32];
  if (seconds < 10) {
    std::snprintf(text, sizeof text, "%.1f s", seconds);
  } else if (seconds < 60) {
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  } else {
    const long s = std::lround(seconds);
    std::snprintf(text, sizeof text, "%ld min %02ld s", s / 60, s % 60);
  }
  return text;
}

double ProfileProgress::SecondsLeft(double fraction_of_current) const {
  // Until a stage has ended, the estimates stand as they are.
  const double scale = estimated_done_ > 0 ? actual_done_ / estimated_done_ : 1.0;
  double left = (1 - fraction_of_current) * stages_[current_].estimated_s;
  for (size_t i = current_ + 1; i < stages_.size(); ++i) left += stages_[i].estimated_s;
  return left * scale;
}

void ProfileProgress::Begin(size_t index) {
  current_ = index;
  stage_start_ = std::chrono::steady_clock::now();
  bar_drawn_ = false;
  out_ << "llmplan profile: [" << index + 1 << "/" << stages_.size() << "] " << stages_[index].what << "  (about "
       << Duration(SecondsLeft(0)) << " left)\n"
       << std::flush;
}

void ProfileProgress::Items(int done, int total) {
  if (!terminal_ || total <= 0) return;
  constexpr int kWidth = 30;
  const double fraction = std::clamp(static_cast<double>(done) / total, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * kWidth);
  out_ << "\r  [" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] " << done << "/" << total
       << "  " << Duration(SecondsLeft(fraction)) << " left   " << std::flush;
  bar_drawn_ = true;
}

void ProfileProgress::End(const std::string& note) {
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
  estimated_done_ += stages_[current_].estimated_s;
  actual_done_ += took;
  if (bar_drawn_) out_ << "\r" << std::string(70, ' ') << "\r";
  out_ << "  done in " << Duration(took) << (note.empty() ? "" : ": " + note) << "\n" << std::flush;
  bar_drawn_ = false;
}

}  // namespace llmplan::executor
