#include "executor/run/stop_request.h"

#include <signal.h>
#include <time.h>

namespace llmplan::executor {

namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_first_signal_s = 0;  // CLOCK_MONOTONIC seconds of the first
struct sigaction g_old_int, g_old_term, g_old_hup;

long MonotonicSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<long>(t.tv_sec);
}

// Async-signal-safe: stores, or on a second signal sigaction + raise. A
// repeat within 2 s is the same request arriving twice (Ctrl-C reaches the
// whole process group, and the launcher forwards it again), not the user's
// second Ctrl-C.
void OnSignal(int sig) {
  if (g_signal != 0) {
    if (MonotonicSeconds() - g_first_signal_s < 2) return;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);
    return;
  }
  g_first_signal_s = static_cast<sig_atomic_t>(MonotonicSeconds());
  g_signal = sig;
}

}  // namespace

StopRequest::StopRequest() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in flight (file writes, socket reads) continue
  ::sigaction(SIGINT, &action, &g_old_int);
  ::sigaction(SIGTERM, &action, &g_old_term);
  ::sigaction(SIGHUP, &action, &g_old_hup);  // a closed terminal or ssh session: save, as for SIGTERM
}

StopRequest::~StopRequest() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGHUP, &g_old_hup, nullptr);
}

int StopRequest::Signal() { return g_signal; }

}  // namespace llmplan::executor
