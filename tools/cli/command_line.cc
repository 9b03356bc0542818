#include "tools/cli/command_line.h"

#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/user_error.h"
#include "tools/cli/version.h"

namespace llmplan::cli {

int RunCommandLine(CLI::App& app, int argc, char** argv) {
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionText(),
                       "Print llmplan's version and the LibTorch, CUDA and NCCL versions it was built with");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "llmplan: " << e.what() << " (see llmplan --help)\n";
    return 2;
  } catch (const UserError& e) {
    std::cerr << "llmplan: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "llmplan: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace llmplan::cli
