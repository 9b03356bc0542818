// CollectiveWatchdog: turns a hung collective into a prompt, named failure.
//
// On GPUs a collective never blocks the host when it is issued, so a peer that
// died or hung shows up as a process that stops making progress with no
// message (the NCCL hangs users complain about). The executor registers each
// collective it issues here; a background thread polls CollectiveWork::Done()
// (which never blocks) and, if one has not finished within the timeout,
// aborts every communicator (so no NCCL kernel keeps the GPU spinning) and
// terminates the process with kCollectiveTimeoutExitStatus after printing ONE
// line to stderr, e.g.
//
//   llmplan: rank 1: collective "reduce-scatter block 3 mb 0" in shard group 0
//   (nccl) did not finish within 30 s; aborting (a peer rank may have died or
//   hung; set LLMPLAN_COLLECTIVE_TIMEOUT_S to wait longer)
//
// (on one line). Tests replace that exit with their own handler.
//
// The line is printed before the abort: once a communicator is aborted, the
// main thread may wake (its synchronize returns, or its next Wait() throws)
// and race the watchdog's exit; the user still sees the collective named.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "executor/comm/communicator.h"

namespace llmplan::executor {

// The process's exit status when the watchdog fires (distinct from 1, a
// failed run, and 2, a user error).
inline constexpr int kCollectiveTimeoutExitStatus = 3;

// LLMPLAN_COLLECTIVE_TIMEOUT_S (seconds, may be fractional) or `fallback`
// when unset. Throws UserError for a non-numeric or non-positive value.
std::chrono::milliseconds CollectiveTimeoutFromEnv(std::chrono::milliseconds fallback);

// The one line printed when a collective times out (no trailing newline).
std::string CollectiveTimeoutMessage(int rank, const std::string& what, const std::string& group,
                                     std::chrono::milliseconds timeout);

class CollectiveWatchdog {
 public:
  // What timed out; handed to the expiry handler.
  struct Expiry {
    int rank = 0;
    std::string what;   // e.g. "reduce-scatter block 3 mb 0"
    std::string group;  // e.g. "shard group 0 (nccl)"
    std::chrono::milliseconds timeout{0};
    std::string message;  // CollectiveTimeoutMessage(...)
  };
  using ExpiryHandler = std::function<void(const Expiry&)>;

  // Starts the watchdog thread. `communicators` are aborted on expiry; they
  // must outlive the watchdog. A null `on_expiry` means the default: print
  // the message line to stderr, Abort() every communicator, then
  // std::_Exit(kCollectiveTimeoutExitStatus) (no destructors: they could wait
  // on the hung collective). A custom handler runs on the watchdog thread,
  // once; after it returns the watchdog stops checking.
  // REQUIRES: timeout > 0.
  CollectiveWatchdog(int rank, std::chrono::milliseconds timeout, std::vector<Communicator*> communicators,
                     ExpiryHandler on_expiry = nullptr);
  ~CollectiveWatchdog();  // stops the thread; does not wait for the watched work
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Watches `work` from now on; forgets it once Done(). Shares ownership so
  // the caller may drop its handle early. `what` and `group` name it in the
  // message (group: Communicator::name()). Thread-safe.
  void Watch(std::shared_ptr<CollectiveWork> work, std::string what, std::string group);

  // Collectives watched and not yet seen done.
  size_t Outstanding() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Watched {
    std::shared_ptr<CollectiveWork> work;
    std::string what;
    std::string group;
    std::chrono::steady_clock::time_point start;
  };
  void Run();

  const int rank_;
  const std::chrono::milliseconds timeout_;
  const std::vector<Communicator*> communicators_;
  ExpiryHandler on_expiry_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Watched> watched_;  // in issue order: the oldest is checked first
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace llmplan::executor
