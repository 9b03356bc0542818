// llmplan doctor: what to know before training on this machine, each line
// judged by measurement (executor/doctor/doctor.h).
//
//   llmplan doctor [--json]
//   llmplan doctor --tune --plan PLAN [--write-profile FILE]
//
// Exit status 0 when nothing is a problem (warnings included, and a machine
// without a GPU), 1 otherwise. --tune times the plan's collectives under
// NCCL's algorithms, protocols and channel counts (executor/doctor/nccl_tune.h)
// and writes the recommendation into a copy of the plan's profile.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "base/atomic_file.h"
#include "base/user_error.h"
#include "executor/doctor/doctor.h"
#include "executor/doctor/nccl_tune.h"
#include "executor/launcher/launcher.h"
#include "planner/plan.h"
#include "planner/program_builder.h"
#include "tools/cli/commands.h"
#include "tools/cli/executor_commands.h"

extern char** environ;

namespace llmplan::cli {

namespace {

struct DoctorOptions {
  bool json = false;
  bool tune = false;
  std::string plan, write_profile;
  // The child of --tune, one per setting (hidden).
  bool tune_child = false;
  int gpus = 0;
  std::string sizes;
};

void Tune(const DoctorOptions& o) {
  if (o.plan.empty()) throw UserError("doctor --tune needs --plan PLAN (whose collectives to time)");
  const Plan plan = LoadPlan(o.plan);
  const HardwareProfile profile = LoadHardwareProfile(plan.profile);
  // The children run this binary by its path: /proc/self/exe would name the shell that starts them.
  const std::string self = executor::SelfExecutable();
  if (self == "/proc/self/exe") throw UserError("doctor --tune: cannot read this program's path (/proc/self/exe)");
  const executor::NcclTuneResult r = executor::RunNcclTuning(BuildStepProgram(plan, profile), self);
  std::cout << executor::NcclTuneText(r);
  if (o.write_profile.empty() || !r.nothing_to_tune.empty()) return;
  HardwareProfile tuned = profile;
  tuned.nccl_settings = r.recommendation.setting.variables;
  std::ostringstream source;
  source << "llmplan doctor --tune on " << r.gpus << " GPUs with the collectives of " << o.plan << ": "
         << (r.recommendation.tuned ? r.recommendation.setting.Name() : std::string("NCCL's own choice")) << ", "
         << 1e3 * r.recommendation.best_step_s << " ms of collectives a step against " << 1e3 * r.recommendation.default_step_s
         << " ms with NCCL's choice";
  tuned.nccl_settings_source = tuned.nccl_settings.empty() ? "" : source.str();
  WriteFileAtomically(o.write_profile, HardwareProfileToJson(tuned).dump(2) + "\n", "profile");
  std::cout << "wrote " << o.write_profile << (tuned.nccl_settings.empty() ? " (no NCCL setting: NCCL decides)" :
                                                  " (llmplan run sets its NCCL variables unless you set them)")
            << "\n";
}

}  // namespace

void AddDoctorCommand(CLI::App& app) {
  auto o = std::make_shared<DoctorOptions>();
  CLI::App* doctor = app.add_subcommand("doctor", ExecutorCommandSummary("doctor"));
  doctor->add_flag("--json", o->json, "Print the checks as JSON");
  doctor->add_flag("--tune", o->tune,
                   "Time the plan's collectives under NCCL_ALGO (Ring, Tree), NCCL_PROTO (Simple, LL, LL128) and "
                   "channel counts, and recommend the fastest (needs --plan; 2+ GPUs)");
  doctor->add_option("--plan", o->plan, "With --tune: the plan whose collectives (sizes, group) are timed");
  doctor->add_option("--write-profile", o->write_profile,
                     "With --tune: write the plan's profile with the recommendation here (llmplan run applies it)");
  doctor->add_flag("--tune-child", o->tune_child)->group("");
  doctor->add_option("--gpus", o->gpus)->group("");
  doctor->add_option("--sizes", o->sizes)->group("");
  doctor->callback([o] {
    if (o->tune_child) {
      std::vector<double> sizes;
      std::stringstream list(o->sizes);
      for (std::string item; std::getline(list, item, ',');) sizes.push_back(std::stod(item));
      executor::RunNcclTuneChild(o->gpus, sizes, std::cout);
      return;
    }
    if (!o->tune && (!o->plan.empty() || !o->write_profile.empty()))
      throw UserError("--plan and --write-profile go with --tune");
    if (o->tune) {
      Tune(*o);
      return;
    }
    const std::vector<executor::Finding> findings = executor::RunDoctor(environ);
    if (o->json) {
      std::cout << executor::DoctorJson(findings).dump(2) << "\n";
    } else {
      std::cout << executor::DoctorText(findings);
    }
    std::cout.flush();
    if (const int status = executor::DoctorExitStatus(findings); status != 0) std::exit(status);
  });
}

}  // namespace llmplan::cli
