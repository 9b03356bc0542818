// Launcher: starts one training process per local rank, supervises them, and
// when one dies stops the others and says which rank died and why — the part
// of torchrun that `llmplan run` needs on one node, without Python.
//
// Each child is this same program (/proc/self/exe) with the same argv, told its
// place through the environment torchrun uses (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), so the code a child
// runs is the same whether this launcher, torchrun or Slurm started it (it
// reads them with ReadDistributedEnv(), executor/comm/distributed_env.h).
// Children select their GPU with LOCAL_RANK rather than CUDA_VISIBLE_DEVICES,
// so NCCL sees every GPU of the node and can use peer-to-peer paths between
// them.
//
// Output: rank 0's stdout passes through; other ranks' stdout is dropped unless
// LLMPLAN_VERBOSE_RANKS=1 (then it is prefixed "[rank N] "). Every rank's
// stderr passes through, each line prefixed "[rank N] ", so a message can be
// attributed to its rank.
//
// Under torchrun or Slurm (UnderExternalLauncher()) nothing is spawned: the
// process runs as the rank it was given.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace llmplan::executor {

struct LaunchSpec {
  // The children's argv (argv[0] included; the program run is /proc/self/exe).
  std::vector<std::string> argv;
  int nprocs = 1;
  // CPU ranks (Gloo): also sets OMP_NUM_THREADS to cores / nprocs when unset,
  // so nprocs thread pools do not each claim every core.
  bool cpu = false;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  // After the first failure the other ranks get SIGTERM, then SIGKILL if they
  // have not exited within `grace` (a rank stuck in a collective whose peer
  // died never returns from it).
  std::chrono::seconds grace{10};
  // After SIGINT/SIGTERM is forwarded the ranks finish their step and save a
  // checkpoint, which for a large model takes minutes: they get SIGKILL only
  // after `stop_grace`, or at once when a second SIGINT/SIGTERM arrives.
  std::chrono::seconds stop_grace{900};
};

// Starts spec.nprocs children and waits for them. Returns 0 when every child
// exited with status 0. When a child exits non-zero or is killed by a signal,
// stops the others (SIGTERM and SIGCONT, SIGKILL after spec.grace), prints one
// line to stderr, e.g.
//   llmplan: rank 2 (pid 1234) died: exited with status 1: <why>; stopped the other 3 ranks
// where <why> is the rank's own error line ("llmplan: ..."), else an uncaught
// exception's what(), else its last stderr line that is not a stack frame.
// A rank found stopped (SIGSTOP, a debugger) when another failed is the cause,
// the failed one (its collective timed out) the victim:
//   llmplan: rank 1 (pid 1235) is stuck (stopped: SIGSTOP or a debugger) so rank 0 (pid 1234)
//   gave up: exited with status 3: rank 0: collective "..." did not finish within 20 s; ...
// (one line). Returns that rank's exit status (128 + the signal number if it was
// killed), so a rank's "2: bad input" reaches the shell. SIGINT/SIGTERM sent
// to the launcher are forwarded to the children (SIGKILL after
// spec.stop_grace or a second signal); it then returns 128 + the signal
// number. Children die with the launcher even if it is SIGKILLed.
// Call from a thread that lives until this returns (the children's
// parent-death signal follows the thread that forked them).
// REQUIRES: spec.nprocs >= 1, !spec.argv.empty(), 0 <= spec.master_port < 65536.
// Throws std::runtime_error if the children cannot be started (any already
// started are stopped first).
int LaunchLocalRanks(const LaunchSpec& spec);
// The same; when a rank failed, *failure_line (if not null) is set to the
// line printed, without its "llmplan: " and newline (for the run's summary:
// rank 0 saw only a consequence, e.g. a collective whose peer died); else "".
int LaunchLocalRanks(const LaunchSpec& spec, std::string* failure_line);

// True when torchrun (RANK and WORLD_SIZE) or Slurm with more than one task
// (SLURM_PROCID and SLURM_NTASKS > 1) has placed this process: it must run as
// the rank it was given instead of spawning. A one-task Slurm allocation
// (`sbatch` running `llmplan run` directly, or `srun -n1`) is not one: there
// this process is the node's launcher.
bool UnderExternalLauncher();

// This process's own argv (from /proc/self/cmdline), for a LaunchSpec that
// re-runs the same command as every rank. Throws std::runtime_error if it
// cannot be read.
std::vector<std::string> SelfArgv();

// The path of this program's binary (readlink of /proc/self/exe); that link
// itself when it cannot be read, which names this program only to an exec
// from this same process.
std::string SelfExecutable();

// A TCP port that was free a moment ago (bind to port 0, read it back, close).
// Another process may take it before the rendezvous binds it; with the
// kernel's ephemeral range that is rare enough for a local launch.
int PickFreePort();

}  // namespace llmplan::executor
