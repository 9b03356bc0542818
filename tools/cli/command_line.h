// RunCommandLine: what both binaries, llmplan and llmplan-executor, do with
// their arguments once their subcommands are registered: parse them, run the
// chosen subcommand, and turn every outcome into an exit status:
//   0  success, --help, --version
//   1  a run that failed (an unexpected error; its message on stderr)
//   2  bad input: exactly one line on stderr, "llmplan: ...", saying what to change
#pragma once

namespace CLI {
class App;
}

namespace llmplan::cli {

// Adds --version (llmplan's version and the LibTorch, CUDA and NCCL versions
// its executor was built with) to `app`, then parses `argv` and runs the
// selected subcommand's callback. A first argument that names no subcommand
// is reported as an unknown command, listing the commands. With no arguments
// it prints the help to stderr and returns 2: nothing was done, and a script
// that lost its command word must not look successful.
// REQUIRES: every subcommand of `app` is registered.
int RunCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace llmplan::cli
