// llmplan profile: measures the machine it runs on and writes a hardware
// profile that `llmplan estimate --gpu PROFILE.json` takes.
//
//   llmplan profile -o PROFILE.json [--name NAME] [--quick] [--gpus N] [--cpu] [--base PROFILE]
//                   [--nvme-dir DIR]
//
// Progress on stderr; the profile's schema is profiles/README.md's, plus the
// raw tables under "measurements" (executor/profile/profiler.h).
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "executor/profile/profiler.h"
#include "tools/cli/commands.h"
#include "tools/cli/executor_commands.h"
#include "tools/cli/version.h"

namespace llmplan::cli {

void AddProfileCommand(CLI::App& app) {
  auto options = std::make_shared<executor::ProfileOptions>();
  CLI::App* profile = app.add_subcommand("profile", ExecutorCommandSummary("profile"));
  profile->add_option("-o,--output", options->output_path, "Profile JSON to write (e.g. profiles/mygpu.json)")
      ->required();
  profile->add_option("--name", options->name, "The profile's name (default: the output file's name without .json)");
  profile->add_flag("--quick", options->quick, "Fewer shapes and sizes, short timings: well under a minute");
  profile->add_option("--gpus", options->gpus, "Local GPUs to measure collectives among (default: all visible)")
      ->check(CLI::Range(1, 1024));
  profile->add_flag("--cpu", options->cpu, "Measure the CPU executor, even where there are GPUs");
  profile->add_option("--base", options->base,
                      "Profile to keep what cannot be measured here from (inter-node curves, datasheet peak, price); "
                      "default: the built-in one named like this GPU, or cpu");
  profile->add_option("--nvme-dir", options->nvme_dir,
                      "Also measure the read and write bandwidth of the SSD holding DIR (for NVMe offload; "
                      "writes 4 GiB there, 1 GiB with --quick)");
  profile->callback([options] {
    options->llmplan_version = VersionText().substr(0, VersionText().find('\n'));
    executor::RunProfile(*options, std::cerr, isatty(STDERR_FILENO) != 0);
  });
}

}  // namespace llmplan::cli
