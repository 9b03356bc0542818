// What the tests that run llmplan on tiny CPU plans share (run_command,
// fault_run, run_summary, run_reporting, disk_full, calibrate_cli,
// checkpoint_staging): the plan, a file read whole, and the "llmplan: " error
// lines of a run's output.
#pragma once

#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/plan.h"

namespace llmplan::executor_test {

// tiny-llama on `gpus` CPU ranks (full_shard when several, else no_shard),
// profile "cpu". Not validated: tests build bad plans from it too.
inline Plan TinyCpuPlan(int gpus, int64_t seq_len = 64, int64_t micro_batch = 2) {
  Plan plan;
  plan.model = PresetModel("tiny-llama");
  plan.profile = "cpu";
  plan.gpus = gpus;
  plan.strategy = gpus > 1 ? ShardingStrategy::kFullShard : ShardingStrategy::kNoShard;
  NormaliseGrouping(plan);
  plan.seq_len = seq_len;
  plan.micro_batch = micro_batch;
  return plan;
}

// A uint16 token file of `count` tokens with structure (a model learns them;
// losses move every step), as resume_test.cc writes its own.
inline void WriteStructuredTokens(const std::string& path, size_t count) {
  std::vector<uint16_t> tokens(count);
  std::mt19937 gen(7);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 31 + (i / 97) + gen() % 3) % 250);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

// The whole of a file ("" when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The lines of `text` that start with "llmplan: " and are not warnings or notes (the
// launcher's and the CLI's own), for checking that exactly one says why.
inline std::vector<std::string> LlmplanErrorLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("llmplan: ", 0) == 0 && line.rfind("llmplan: warning", 0) != 0 && line.rfind("llmplan: note", 0) != 0)
      lines.push_back(line);
  return lines;
}

}  // namespace llmplan::executor_test
