// CollectiveWatchdog (see collective_watchdog.h).
#include "executor/comm/collective_watchdog.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "base/user_error.h"

namespace llmplan::executor {

std::chrono::milliseconds CollectiveTimeoutFromEnv(std::chrono::milliseconds fallback) {
  const char* text = std::getenv("LLMPLAN_COLLECTIVE_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (*end != '\0' || !std::isfinite(seconds) || seconds <= 0) {
    throw UserError(std::string("LLMPLAN_COLLECTIVE_TIMEOUT_S=\"") + text + "\" must be a positive number of seconds");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

std::string CollectiveTimeoutMessage(int rank, const std::string& what, const std::string& group,
                                     std::chrono::milliseconds timeout) {
  char seconds[32];
  if (timeout.count() % 1000 == 0) {
    std::snprintf(seconds, sizeof(seconds), "%lld", static_cast<long long>(timeout.count() / 1000));
  } else {
    std::snprintf(seconds, sizeof(seconds), "%.1f", static_cast<double>(timeout.count()) / 1000.0);
  }
  return "llmplan: rank " + std::to_string(rank) + ": collective \"" + what + "\" in " + group +
         " did not finish within " + seconds +
         " s; aborting (a peer rank may have died or hung; set LLMPLAN_COLLECTIVE_TIMEOUT_S to wait longer)";
}

CollectiveWatchdog::CollectiveWatchdog(int rank, std::chrono::milliseconds timeout,
                                       std::vector<Communicator*> communicators, ExpiryHandler on_expiry)
    : rank_(rank), timeout_(timeout), communicators_(std::move(communicators)), on_expiry_(std::move(on_expiry)) {
  if (!on_expiry_) {
    on_expiry_ = [this](const Expiry& expiry) {
      // Print first: aborting a wedged communicator is the step most likely
      // to misbehave, and the line is what the user needs.
      std::fprintf(stderr, "%s\n", expiry.message.c_str());
      std::fflush(stderr);
      for (Communicator* communicator : communicators_) communicator->Abort();
      std::_Exit(kCollectiveTimeoutExitStatus);
    };
  }
  thread_ = std::thread([this] { Run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::Watch(std::shared_ptr<CollectiveWork> work, std::string what, std::string group) {
  std::lock_guard<std::mutex> lock(mutex_);
  watched_.push_back(Watched{std::move(work), std::move(what), std::move(group), std::chrono::steady_clock::now()});
}

size_t CollectiveWatchdog::Outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return watched_.size();
}

void CollectiveWatchdog::Run() {
  // Poll a few times per timeout, at most every 100 ms: Done() is an event
  // query (no device sync), so polling costs microseconds.
  const auto period = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(100),
                                                           std::max<std::chrono::milliseconds>(timeout_ / 10,
                                                                                               std::chrono::milliseconds(1)));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, period, [this] { return stopping_; });
    if (stopping_) break;
    const auto now = std::chrono::steady_clock::now();
    // Collectives on one communicator finish in issue order, so finished ones
    // are mostly at the front; check everything anyway (several groups).
    for (auto it = watched_.begin(); it != watched_.end();) {
      if (it->work->Done()) {
        it = watched_.erase(it);
        continue;
      }
      if (now - it->start >= timeout_) {
        Expiry expiry{rank_, it->what, it->group, timeout_,
                      CollectiveTimeoutMessage(rank_, it->what, it->group, timeout_)};
        watched_.clear();
        stopping_ = true;  // fire once
        lock.unlock();
        on_expiry_(expiry);
        return;
      }
      ++it;
    }
  }
}

}  // namespace llmplan::executor
