// Launcher: fork/exec of the local ranks, an output pump that prefixes their
// lines, and a supervision loop that stops the job at the first failure.
#include "executor/launcher/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "base/format.h"

extern char** environ;

namespace llmplan::executor {

namespace {

using Clock = std::chrono::steady_clock;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

void WriteAll(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal went away: nothing useful to do
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// ---------------------------------------------------------------------------
// The line of a rank's stderr that says why it failed. A LibTorch error is
// many lines (the message, then "Exception raised from ..." and 30 "frame #N"
// lines), so the last line is a stack frame. Preferred, latest first: the
// rank's own one-line error ("llmplan: ...", not a warning), then the message
// of an uncaught exception ("what():  ..."), then any line that is not part of
// a backtrace.

int LineRank(std::string_view line) {
  if (line.rfind("llmplan: ", 0) == 0 && line.rfind("llmplan: warning", 0) != 0) return 3;
  if (line.find("what():") != std::string_view::npos) return 2;
  if (line.rfind("frame #", 0) == 0 || line.rfind("Exception raised from", 0) == 0 ||
      line.rfind("<unknown function>", 0) == 0 || line.rfind("terminate called", 0) == 0)
    return 0;
  return 1;
}

std::string CauseLine(std::string_view line) {
  std::string_view text = line;
  const size_t what = text.find("what():");
  if (what != std::string_view::npos) text = text.substr(what + 7);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  if (text.rfind("llmplan: ", 0) == 0) text.remove_prefix(9);  // the launcher's line says it already
  constexpr size_t kMax = 400;
  std::string out(text.substr(0, kMax));
  if (text.size() > kMax) out += "...";
  return out;
}

// ---------------------------------------------------------------------------
// Output pump: one thread polls every child's pipes and writes whole lines,
// prefixed with the rank, to the launcher's stdout/stderr. One writer means
// lines of different ranks never interleave mid-line. It remembers, per rank,
// the stderr line that best says why it failed (LineRank).

class OutputPump {
 public:
  struct Source {
    int fd;       // read end, owned by the pump from now on
    int rank;
    int sink_fd;  // STDOUT_FILENO or STDERR_FILENO
    bool is_stderr;
  };

  explicit OutputPump(std::vector<Source> sources) {
    for (Source& s : sources) {
      ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) | O_NONBLOCK);
      streams_.push_back(Stream{s, "", false});
    }
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error(Errno("launcher: pipe"));
    thread_ = std::thread([this] { Run(); });
  }
  ~OutputPump() { Stop(std::chrono::milliseconds(0)); }
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // Waits until `rank`'s stderr has closed (its process, and any it forked,
  // have exited) or `timeout` has passed, so the failure message can quote
  // the last line the rank wrote.
  void WaitStderrClosed(int rank, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return stderr_closed_.count(rank) > 0; });
  }

  // The best cause line (CauseLine of the highest LineRank, latest first).
  std::string FailureLine(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cause_.find(rank);
    return it == cause_.end() ? "" : it->second.second;
  }

  // Lets the pipes drain until they close or `drain` has passed (a grandchild
  // may hold a pipe open forever), then writes what is left and stops.
  void Stop(std::chrono::milliseconds drain) {
    if (!thread_.joinable()) return;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, drain, [&] { return all_closed_; });
    }
    stop_.store(true);
    WriteAll(wake_[1], "x");
    thread_.join();
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

 private:
  struct Stream {
    Source source;
    std::string partial;  // bytes after the last newline
    bool closed;
  };
  void Emit(Stream& s, std::string_view line) {
    std::string out = "[rank " + std::to_string(s.source.rank) + "] ";
    out.append(line);
    out.push_back('\n');
    WriteAll(s.source.sink_fd, out);
    if (s.source.is_stderr) {
      const size_t first = line.find_first_not_of(" \t\r");
      if (first != std::string_view::npos) {
        const std::string_view text = line.substr(first);
        const int rank = LineRank(text);
        std::lock_guard<std::mutex> lock(mu_);
        auto it = cause_.find(s.source.rank);
        if (it == cause_.end() || rank >= it->second.first) cause_[s.source.rank] = {rank, CauseLine(text)};
      }
    }
  }

  // Reads what is available; returns false at end of file.
  bool Drain(Stream& s) {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(s.source.fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      s.partial.append(buffer, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        Emit(s, std::string_view(s.partial).substr(start, nl - start));
      }
      s.partial.erase(0, start);
      // A line without an end (a progress bar redrawn with \r) still has to
      // show up eventually.
      if (s.partial.size() > 16384) {
        Emit(s, s.partial);
        s.partial.clear();
      }
    }
  }

  void Close(Stream& s) {
    if (!s.partial.empty()) Emit(s, s.partial);
    s.partial.clear();
    ::close(s.source.fd);
    s.closed = true;
    std::lock_guard<std::mutex> lock(mu_);
    if (s.source.is_stderr) stderr_closed_.insert(s.source.rank);
    all_closed_ = std::all_of(streams_.begin(), streams_.end(), [](const Stream& t) { return t.closed; });
    cv_.notify_all();
  }

  void Run() {
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Stream*> owners;
      for (Stream& s : streams_) {
        if (s.closed) continue;
        fds.push_back(pollfd{s.source.fd, POLLIN, 0});
        owners.push_back(&s);
      }
      if (stop_.load()) {
        for (Stream* s : owners) {
          Drain(*s);
          Close(*s);
        }
        return;
      }
      fds.push_back(pollfd{wake_[0], POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      for (size_t i = 0; i < owners.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!Drain(*owners[i])) Close(*owners[i]);
      }
      if (fds.back().revents != 0) {
        char sink[64];
        while (::read(wake_[0], sink, sizeof sink) > 0) {
        }
      }
    }
  }

  std::vector<Stream> streams_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<int> stderr_closed_;
  std::map<int, std::pair<int, std::string>> cause_;  // rank -> (LineRank, CauseLine)
  bool all_closed_ = false;
};

// ---------------------------------------------------------------------------
// Signals received by the launcher while it supervises. The handler only
// records the signal; the supervision loop, which polls every few ms, forwards it.

volatile sig_atomic_t g_received_signal = 0;
volatile sig_atomic_t g_signal_count = 0;  // a second one means "now"

void RecordSignal(int sig) {
  g_received_signal = sig;
  g_signal_count = g_signal_count + 1;
}

class ForwardedSignals {
 public:
  ForwardedSignals() {
    g_received_signal = 0;
    g_signal_count = 0;
    struct sigaction action {};
    action.sa_handler = RecordSignal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
    ::sigaction(SIGHUP, &action, &old_hup_);  // a closed terminal: the ranks save, as for SIGTERM
  }
  ~ForwardedSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGHUP, &old_hup_, nullptr);
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_hup_ {};
  struct sigaction old_term_ {};
};

// ---------------------------------------------------------------------------
// Spawning.

std::vector<std::string> ChildEnvironment(const LaunchSpec& spec, int rank, int port) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(spec.nprocs)},
      {"LOCAL_WORLD_SIZE", std::to_string(spec.nprocs)},
      {"GROUP_RANK", "0"},
      {"GROUP_WORLD_SIZE", "1"},
      {"MASTER_ADDR", spec.master_addr},
      {"MASTER_PORT", std::to_string(port)},
  };
  // NVLink multicast (NVLS) stays off unless the user asked for it: on shared
  // machines it can take GPUs out of service, and it buys little at 2-8 GPUs.
  if (std::getenv("NCCL_NVLS_ENABLE") == nullptr) set.emplace_back("NCCL_NVLS_ENABLE", "0");
  if (spec.cpu && std::getenv("OMP_NUM_THREADS") == nullptr) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    set.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(spec.nprocs))));
  }
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string key = entry.substr(0, entry.find('='));
    const bool overridden =
        std::any_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == key; });
    if (!overridden) env.push_back(entry);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}


struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // from waitpid, valid once !running
};

// Forks and execs one rank. Between fork and exec the child only makes
// async-signal-safe system calls: the launcher may have other threads
// (LibTorch's pools), whose locks a forked child must never touch.
pid_t SpawnRank(const std::string& exe, std::vector<char*>& argv, std::vector<char*>& envp, int stdout_fd,
                int stderr_fd) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(Errno("launcher: fork"));
  if (pid > 0) return pid;
  // Child. If the launcher dies (even by SIGKILL) the ranks must not live on
  // holding GPUs: the kernel kills them when their parent goes.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (stdout_fd >= 0) ::dup2(stdout_fd, STDOUT_FILENO);
  ::dup2(stderr_fd, STDERR_FILENO);
  ::execve(exe.c_str(), argv.data(), envp.data());
  static const char kMessage[] = "llmplan: launcher: cannot execute the rank's program\n";
  [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  ::_exit(127);
}

std::string DescribeStatus(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + SignalName(sig) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

bool Failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// The signal a rank received itself and stopped on, at a step boundary with
// a checkpoint (it exits 128 + SIGINT, SIGTERM or SIGHUP: see run_command.cc),
// or 0. Its peers stop at the same boundary and exit 0.
int StoppedOnSignal(int status) {
  if (!WIFEXITED(status)) return 0;
  const int sig = WEXITSTATUS(status) - 128;
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP ? sig : 0;
}

// True when a rank's cause line is a collective that failed or timed out
// (the communicators' and the watchdog's messages name the group and its
// backend): a consequence of another rank's failure, if there is one.
bool PeerFailure(const std::string& cause) {
  if (cause.find("another rank found ") != std::string::npos) return true;  // training_state.cc's checkpoint vote
  return cause.find(" group ") != std::string::npos &&
         (cause.find("(gloo)") != std::string::npos || cause.find("(nccl)") != std::string::npos);
}

// The scheduler state of `pid` from /proc/PID/stat ('R', 'S', 'D', 'T'
// stopped, 't' stopped by a tracer, ...), or '?' if it cannot be read.
char ProcessState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
}

std::string Ranks(int n) { return std::to_string(n) + (n == 1 ? " rank" : " ranks"); }

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

std::string SelfExecutable() {
  std::vector<char> buffer(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  if (n <= 0) return "/proc/self/exe";
  return std::string(buffer.data(), static_cast<size_t>(n));
}

// ---------------------------------------------------------------------------

int PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(Errno("launcher: socket"));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string message = Errno("launcher: cannot find a free TCP port");
    ::close(fd);
    throw std::runtime_error(message);
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

std::vector<std::string> SelfArgv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  if (argv.empty()) throw std::runtime_error("launcher: cannot read /proc/self/cmdline");
  return argv;
}

bool UnderExternalLauncher() {
  if (Env("RANK") && Env("WORLD_SIZE")) return true;
  if (Env("SLURM_PROCID")) {
    const std::optional<std::string> tasks = Env("SLURM_NTASKS") ? Env("SLURM_NTASKS") : Env("SLURM_NPROCS");
    return tasks && std::atoi(tasks->c_str()) > 1;
  }
  return false;
}

int LaunchLocalRanks(const LaunchSpec& spec) { return LaunchLocalRanks(spec, nullptr); }

int LaunchLocalRanks(const LaunchSpec& spec, std::string* failure_line) {
  if (failure_line != nullptr) failure_line->clear();
  if (spec.nprocs < 1) throw std::runtime_error("launcher: nprocs must be at least 1");
  if (spec.argv.empty()) throw std::runtime_error("launcher: empty argv");
  if (spec.master_port < 0 || spec.master_port > 65535) {
    throw std::runtime_error("launcher: master_port " + std::to_string(spec.master_port) + " is not a TCP port");
  }
  const int port = spec.master_port != 0 ? spec.master_port : PickFreePort();
  const bool verbose = Env("LLMPLAN_VERBOSE_RANKS").value_or("0") != "0";
  const std::string exe = SelfExecutable();
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv = CStrings(argv_strings);

  // Handlers first, so a Ctrl-C that arrives while ranks start is forwarded
  // instead of killing the launcher and orphaning the ranks started so far.
  ForwardedSignals signals;
  std::fflush(stdout);
  std::fflush(stderr);

  const int dev_null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  std::vector<Child> children;
  std::vector<OutputPump::Source> sources;
  auto kill_started = [&] {
    for (Child& c : children) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
    }
    for (const OutputPump::Source& s : sources) ::close(s.fd);
    if (dev_null >= 0) ::close(dev_null);
  };
  try {
    for (int rank = 0; rank < spec.nprocs; ++rank) {
      int err[2], out[2] = {-1, -1};
      if (::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error(Errno("launcher: pipe"));
      sources.push_back({err[0], rank, STDERR_FILENO, true});
      int stdout_fd = -1;  // -1: inherit the launcher's (rank 0)
      if (rank != 0 && verbose) {
        if (::pipe2(out, O_CLOEXEC) != 0) {
          ::close(err[1]);
          throw std::runtime_error(Errno("launcher: pipe"));
        }
        sources.push_back({out[0], rank, STDOUT_FILENO, false});
        stdout_fd = out[1];
      } else if (rank != 0) {
        stdout_fd = dev_null;
      }
      std::vector<std::string> env_strings = ChildEnvironment(spec, rank, port);
      std::vector<char*> envp = CStrings(env_strings);
      pid_t pid = -1;
      try {
        pid = SpawnRank(exe, argv, envp, stdout_fd, err[1]);
      } catch (...) {
        ::close(err[1]);
        if (out[1] >= 0) ::close(out[1]);
        throw;
      }
      // The write ends now belong to the child alone, so its exit closes them.
      ::close(err[1]);
      if (out[1] >= 0) ::close(out[1]);
      children.push_back(Child{rank, pid, true, 0});
    }
  } catch (...) {
    kill_started();
    throw;
  }
  if (dev_null >= 0) ::close(dev_null);
  OutputPump pump(std::move(sources));

  // Supervision: poll every child without blocking, so that a failure, a
  // signal to the launcher and the grace deadline are all seen within ~20 ms.
  std::optional<size_t> failed;  // index of the child blamed for the stop
  std::vector<Child> stuck;      // ranks found stopped when it failed
  int forwarded_signal = 0;
  bool stopping = false, escalated = false;
  int stopped = 0, killed_after_grace = 0;
  Clock::time_point deadline{}, stop_started{}, killed_at{};
  auto running_count = [&] {
    return static_cast<int>(std::count_if(children.begin(), children.end(), [](const Child& c) { return c.running; }));
  };
  auto signal_running = [&](int sig) {
    for (Child& c : children) {
      if (c.running) ::kill(c.pid, sig);
    }
  };
  std::vector<size_t> failures;  // children that failed before the job was stopped, in the order seen
  std::optional<size_t> signalled;  // the first rank that stopped on a signal sent to it alone
  auto reap = [&] {
    for (size_t i = 0; i < children.size(); ++i) {
      Child& c = children[i];
      if (!c.running) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      c.running = false;
      c.status = r < 0 ? 0 : status;
      // A child that dies after the launcher was signalled (a Ctrl-C reaches
      // the whole process group) or after we began stopping the job is not
      // the cause of the stop.
      if (!Failed(c.status) || stopping || g_received_signal != 0) continue;
      if (StoppedOnSignal(c.status) != 0) {
        // Not a failure: its peers stop at the same step and exit on their
        // own; they get the stop grace before SIGKILL.
        if (!signalled) signalled = i;
        if (!stopping) {
          stopping = true;
          stop_started = Clock::now();
          stopped = running_count();
          deadline = Clock::now() + spec.stop_grace;
        }
        continue;
      }
      failures.push_back(i);
    }
  };
  while (running_count() > 0) {
    reap();
    if (!failures.empty() && !failed && !stopping && g_received_signal == 0) {
      // When one rank dies its peers' collectives fail a moment later
      // ("Connection closed by peer"); the order the launcher sees them in
      // is a race. Give them a moment, then blame a rank whose own error is
      // not a failed collective.
      pump.WaitStderrClosed(children[failures.front()].rank, std::chrono::milliseconds(500));
      reap();
      for (size_t i : failures) pump.WaitStderrClosed(children[i].rank, std::chrono::milliseconds(200));
      failed = failures.front();
      for (size_t i : failures) {
        if (!PeerFailure(pump.FailureLine(children[i].rank))) {
          failed = i;
          break;
        }
      }
      // Every failure so far is a peer's ("Connection closed by peer"): the
      // rank that caused it may still be tearing LibTorch down after printing
      // its own error (seconds on a loaded machine). Wait for it to exit, then
      // blame it.
      if (PeerFailure(pump.FailureLine(children[*failed].rank))) {
        const auto deadline = Clock::now() + std::chrono::seconds(5);
        std::optional<size_t> cause;
        while (!cause && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          reap();
          for (size_t i : failures)
            if (!PeerFailure(pump.FailureLine(children[i].rank))) cause = i;
        }
        if (cause) {
          pump.WaitStderrClosed(children[*cause].rank, std::chrono::milliseconds(200));
          failed = cause;
        }
      }
    }
    if (!stopping && g_received_signal != 0) {
      forwarded_signal = g_received_signal;
      stopping = true;
      stop_started = Clock::now();
      stopped = running_count();
      signal_running(forwarded_signal);
      signal_running(SIGCONT);
      // The ranks save a checkpoint before they exit: give them time.
      deadline = Clock::now() + spec.stop_grace;
    }
    if (forwarded_signal != 0 && !escalated && g_signal_count > 1) deadline = Clock::now();  // a second Ctrl-C
    if (!stopping && failed) {
      stopping = true;
      stop_started = Clock::now();
      // A rank that is stopped (SIGSTOP, a debugger) makes its peers' next
      // collective time out: the rank that reports the timeout is the victim,
      // the stopped one the cause. Look before signalling anything.
      for (const Child& c : children)
        if (c.running && (ProcessState(c.pid) == 'T' || ProcessState(c.pid) == 't')) stuck.push_back(c);
      stopped = running_count();
      signal_running(SIGTERM);
      signal_running(SIGCONT);  // a stopped rank acts on SIGTERM only once it runs again
      deadline = Clock::now() + spec.grace;
    }
    if (stopping && !escalated && running_count() > 0 && Clock::now() >= deadline) {
      // Still alive after the grace period: most likely blocked in a
      // collective waiting for the dead peer, where SIGTERM is not acted on.
      escalated = true;
      killed_at = Clock::now();
      killed_after_grace = running_count();
      signal_running(SIGKILL);
    }
    if (running_count() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pump.Stop(std::chrono::milliseconds(1000));

  std::string tail;
  if (killed_after_grace > 0) {
    // The time they were given, not the grace they might have had: a second
    // Ctrl-C escalates at once.
    const double given = std::chrono::duration<double>(killed_at - stop_started).count();
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", given);
    tail = " (" + std::to_string(killed_after_grace) + " needed SIGKILL after " + seconds + " s)";
  }
  if (failed) {
    const Child& c = children[*failed];
    std::string message = "llmplan: ";
    for (size_t i = 0; i < stuck.size(); ++i) {
      message += (i > 0 ? " and rank " : "rank ") + std::to_string(stuck[i].rank) + " (pid " +
                 std::to_string(stuck[i].pid) + ")";
    }
    if (!stuck.empty()) message += std::string(stuck.size() > 1 ? " are" : " is") + " stuck (stopped: SIGSTOP or a debugger) so ";
    message += "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " +
               (stuck.empty() ? "died" : "gave up") + ": " + DescribeStatus(c.status);
    const std::string cause = pump.FailureLine(c.rank);
    if (!cause.empty()) message += ": " + cause;
    message += "; stopped the other " + Ranks(stopped) + tail + "\n";
    WriteAll(STDERR_FILENO, message);
    if (failure_line != nullptr) *failure_line = message.substr(9, message.size() - 10);  // "llmplan: ", "\n"
    // The rank's own status, so llmplan's convention (2: bad input) survives
    // the launcher; a shell's 128 + signal for a rank that was killed.
    if (WIFSIGNALED(c.status)) return 128 + WTERMSIG(c.status);
    return WEXITSTATUS(c.status);
  }
  if (signalled) {
    const Child& c = children[*signalled];
    const int sig = StoppedOnSignal(c.status);
    WriteAll(STDERR_FILENO, "llmplan: rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") received " +
                                SignalName(sig) + "; every rank stopped at the same step with a checkpoint" + tail +
                                "\n");
    return 128 + sig;
  }
  if (forwarded_signal != 0) {
    WriteAll(STDERR_FILENO, "llmplan: received " + SignalName(forwarded_signal) + "; stopped " + Ranks(stopped) +
                                tail + "\n");
    return 128 + forwarded_signal;
  }
  return 0;
}

}  // namespace llmplan::executor
