#include "tools/cli/command_line.h"

#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "base/user_error.h"
#include "tools/cli/version.h"

namespace llmplan::cli {

namespace {

// CLI11 answers an unknown first word with "A subcommand is required" or
// "The following argument was not expected", which does not say that the
// word was taken for a command.
bool NamesNoSubcommand(const CLI::App& app, const std::string& word) {
  if (word.empty() || word[0] == '-') return false;  // an option: CLI11 reports it
  for (const CLI::App* subcommand : app.get_subcommands({})) {
    if (subcommand->check_name(word)) return false;
  }
  return true;
}

std::string CommandList(const CLI::App& app) {
  std::string list;
  for (const CLI::App* subcommand : app.get_subcommands({})) {
    list += (list.empty() ? "" : ", ") + subcommand->get_name();
  }
  return list;
}

}  // namespace

int RunCommandLine(CLI::App& app, int argc, char** argv) {
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionText(),
                       "Print llmplan's version and the LibTorch, CUDA and NCCL versions it was built with");
  if (argc < 2) {
    std::cerr << app.help();
    return 2;
  }
  if (NamesNoSubcommand(app, argv[1])) {
    std::cerr << "llmplan: unknown command '" << argv[1] << "'; commands: " << CommandList(app)
              << " (see llmplan --help)\n";
    return 2;
  }
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
