// llmplan-executor: the executor's subcommands (LibTorch). Users reach it as
// `llmplan run|profile|doctor|export ...`: llmplan execs this binary with the
// same arguments. It can also be run directly, and it is what the launcher
// starts for every rank (it re-runs its own binary: executor/launcher).
// Exit status: 0 success, 1 a run that failed, 2 bad input (one-line message).
#include <csignal>

#include <CLI/CLI.hpp>

#include "tools/cli/command_line.h"
#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  using namespace llmplan::cli;
  // A write to a peer that died (Gloo's TCP pairs, the rendezvous store)
  // must fail with EPIPE, which the collective turns into an error naming the
  // rank that stopped; by default SIGPIPE would end this rank silently, with
  // nothing in its log (Python, under which PyTorch's ranks run, ignores it).
  std::signal(SIGPIPE, SIG_IGN);
  // Named llmplan, not llmplan-executor: its help is what `llmplan run --help` shows.
  CLI::App app{"llmplan-executor: the executor commands of llmplan (LibTorch); users run them as llmplan COMMAND",
               "llmplan"};
  // One line per subcommand; each is also a row of kExecutorCommands.
  AddRunCommand(app);
  AddProfileCommand(app);
  AddDoctorCommand(app);
  AddExportCommand(app);
  return RunCommandLine(app, argc, argv);
}
