#include "executor/stop_request.h"

#include <signal.h>

#include <atomic>

namespace llmplan::executor {

namespace {

volatile sig_atomic_t g_signal = 0;
struct sigaction g_old_int, g_old_term;

// Async-signal-safe: a store, or on the second signal sigaction + raise.
void OnSignal(int sig) {
  if (g_signal != 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);
    return;
  }
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
}

StopRequest::~StopRequest() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopRequest::Signal() { return g_signal; }

}  // namespace llmplan::executor
