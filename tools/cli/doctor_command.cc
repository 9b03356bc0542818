// llmplan doctor: what to know before training on this machine, each line
// judged by measurement (executor/doctor/doctor.h).
//
//   llmplan doctor [--json]
//
// Exit status 0 when nothing is a problem (warnings included, and a machine
// without a GPU), 1 otherwise.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "executor/doctor/doctor.h"
#include "tools/cli/commands.h"
#include "tools/cli/executor_commands.h"

extern char** environ;

namespace llmplan::cli {

void AddDoctorCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* doctor = app.add_subcommand("doctor", ExecutorCommandSummary("doctor"));
  doctor->add_flag("--json", *json, "Print the checks as JSON");
  doctor->callback([json] {
    const std::vector<executor::Finding> findings = executor::RunDoctor(environ);
    if (*json) {
      std::cout << executor::DoctorJson(findings).dump(2) << "\n";
    } else {
      std::cout << executor::DoctorText(findings);
    }
    std::cout.flush();
    if (const int status = executor::DoctorExitStatus(findings); status != 0) std::exit(status);
  });
}

}  // namespace llmplan::cli
