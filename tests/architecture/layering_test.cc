// The layers of docs/ARCHITECTURE.md, checked on every source file's
// includes, so the layering cannot silently break again:
//
//   tools/            the commands                     may include anything
//   feedback/         measured runs, compare, calibrate  base, data, planner, simulator
//   simulator/  executor/   the two interpreters of one StepProgram, side by side:
//                     simulator: base, planner; executor: base, data, planner
//   planner/  data/   models, profiles, the program, search; token files   base (and itself)
//   base/             small shared helpers             itself only
//
// Every layer may include itself. Feedback, like everything the planner
// commands link, stays free of LibTorch, so it does not include executor/.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llmplan {
namespace {

const std::map<std::string, std::set<std::string>>& AllowedBelow() {
  static const std::map<std::string, std::set<std::string>> allowed = {
      {"base", {}},
      {"data", {"base"}},
      {"planner", {"base"}},
      {"simulator", {"base", "planner"}},
      {"executor", {"base", "data", "planner"}},
      {"feedback", {"base", "data", "planner", "simulator"}},
  };
  return allowed;
}

// One source file: its path from the root ("executor/run/trainer.cc") and text.
struct SourceFile {
  std::string path;
  std::string text;
};

// "FILE includes LAYER/... (LAYER is above or beside FILE's layer)" for every
// include that breaks the rule; empty when the files keep it.
std::vector<std::string> LayeringViolations(const std::vector<SourceFile>& files) {
  static const std::regex include(R"(^\s*#\s*include\s*"([a-z_]+)/[^"]*")");
  std::vector<std::string> violations;
  for (const SourceFile& f : files) {
    const std::string layer = f.path.substr(0, f.path.find('/'));
    auto rule = AllowedBelow().find(layer);
    if (rule == AllowedBelow().end()) continue;  // tools/ and tests/: anything
    std::istringstream lines(f.text);
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const std::string target = m[1];
      if (target == layer || rule->second.count(target) > 0 || (AllowedBelow().count(target) == 0 && target != "tools"))
        continue;
      violations.push_back(f.path + ":" + std::to_string(number) + " includes " + target + "/ (" + target +
                           " is above or beside " + layer + ")");
    }
  }
  return violations;
}

std::vector<SourceFile> TreeSources() {
  namespace fs = std::filesystem;
  std::vector<SourceFile> files;
  const fs::path root(LLMPLAN_SOURCE_DIR);
  for (const auto& [layer, below] : AllowedBelow()) {
    for (const auto& entry : fs::recursive_directory_iterator(root / layer)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      files.push_back({fs::relative(entry.path(), root).generic_string(), text.str()});
    }
  }
  return files;
}

TEST(LayeringTest, TheCheckCatchesAnExecutorFileIncludingTheSimulatorOrFeedback) {
  const std::vector<SourceFile> broken = {
      {"executor/run/trainer.cc", "#include \"executor/run/trainer.h\"\n#include \"simulator/evaluate.h\"\n"},
      {"executor/run/kernel_trace.cc", "  #include \"feedback/kernel_profile.h\"\n"},
      {"simulator/simulator.cc", "#include \"executor/step/step_interpreter.h\"\n"},
      {"planner/plan.cc", "#include \"tools/cli/commands.h\"\n"},
  };
  const std::vector<std::string> found = LayeringViolations(broken);
  ASSERT_EQ(found.size(), 4u);
  EXPECT_EQ(found[0], "executor/run/trainer.cc:2 includes simulator/ (simulator is above or beside executor)");
  EXPECT_EQ(found[1], "executor/run/kernel_trace.cc:1 includes feedback/ (feedback is above or beside executor)");
  EXPECT_EQ(found[2], "simulator/simulator.cc:1 includes executor/ (executor is above or beside simulator)");
  EXPECT_EQ(found[3], "planner/plan.cc:1 includes tools/ (tools is above or beside planner)");
  const std::vector<SourceFile> fine = {
      {"executor/run/trainer.cc", "#include \"planner/plan.h\"\n#include \"base/format.h\"\n#include <vector>\n"},
      {"feedback/comparison.cc", "#include \"simulator/evaluate.h\"\n"},
      {"tools/cli/run_command.cc", "#include \"feedback/kernel_profile.h\"\n"},
  };
  EXPECT_TRUE(LayeringViolations(fine).empty());
}

TEST(LayeringTest, EverySourceFileIncludesOnlyLayersBelowItsOwn) {
  const std::vector<SourceFile> files = TreeSources();
  ASSERT_GT(files.size(), 100u) << "the source tree was not found at " << LLMPLAN_SOURCE_DIR;
  std::string report;
  for (const std::string& v : LayeringViolations(files)) report += v + "\n";
  EXPECT_TRUE(report.empty()) << report;
}

}  // namespace
}  // namespace llmplan
