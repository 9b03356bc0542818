// Start-up of the llmplan CLI as a user meets it: the wall time of whole
// processes, fork to exit, of `llmplan --help` and of a 70B estimate
// (Llama-3-70B on 64 x H100, seq 8192, 512 sequences per step: the plan
// search included). Whatever the binary loads before main (LibTorch's
// libraries, once) is in these numbers; no benchmark inside a process sees it.
//
//   taskset -c 0 build/tools/startup_bench --benchmark_repetitions=3
//
// LLMPLAN_BINARY: the llmplan to time (default: the one beside this program).
// LLMPLAN_BASELINE_BINARY: another llmplan to time in the same run, e.g. one
// built before a change; its benchmarks end in /baseline.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

const std::vector<std::string> kHelp = {"--help"};
const std::vector<std::string> kEstimate70b = {"estimate", "--model", "llama3-70b", "--gpus", "64", "--gpu",
                                               "h100-sxm-80g", "--seq", "8192", "--global-batch", "512"};

// Runs `argv` (argv[0] is the binary) with stdout and stderr on /dev/null
// and returns its wait status.
int RunProcess(const std::vector<char*>& argv) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = -1;
  if (pid > 0) ::waitpid(pid, &status, 0);
  return status;
}

void BM_Process(benchmark::State& state, const std::string& binary, const std::vector<std::string>& args) {
  std::vector<std::string> strings = {binary};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto _ : state) {
    const int status = RunProcess(argv);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      state.SkipWithError((binary + " failed (run it by hand to see why)").c_str());
      break;
    }
  }
}

void Register(const std::string& label, const std::string& binary) {
  if (!std::filesystem::exists(binary)) {
    std::fprintf(stderr, "startup_bench: %s not found (LLMPLAN_BINARY, LLMPLAN_BASELINE_BINARY)\n", binary.c_str());
    std::exit(2);
  }
  // Real time: the work is in the child, which this process's CPU clock does not see.
  benchmark::RegisterBenchmark(("BM_Help/" + label).c_str(), BM_Process, binary, kHelp)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("BM_Estimate_Llama3_70b_64Gpus/" + label).c_str(), BM_Process, binary, kEstimate70b)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

std::string LlmplanBesideThisProgram() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "llmplan").string();
}

}  // namespace

int main(int argc, char** argv) {
  const char* binary = std::getenv("LLMPLAN_BINARY");
  Register("current", binary != nullptr && *binary != '\0' ? binary : LlmplanBesideThisProgram());
  if (const char* baseline = std::getenv("LLMPLAN_BASELINE_BINARY"); baseline != nullptr && *baseline != '\0') {
    Register("baseline", baseline);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
