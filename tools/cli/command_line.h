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
// selected subcommand's callback.
// REQUIRES: every subcommand of `app` is registered.
int RunCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace llmplan::cli
