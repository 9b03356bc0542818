// Tokenizer throughput on one thread: MB of text encoded per second by each
// fixture tokenizer (tests/data/tokenizers, unpacked by the tests' CMake into
// build*/tests/tokenizers) on Debian's fortunes, and the time to load each.
// `llmplan data prepare` runs one encoder per thread on top of this.
//
//   build/tools/tokenizer_bench --benchmark_min_time=2
//
// LLMPLAN_TOKENIZERS: the folder holding gpt2/, llama3/, mistral/, llama2/, sp_unigram/
// (default: the build tree's). LLMPLAN_BENCH_TEXT: the text (default: the
// fortunes package's computers, cookie, definitions, fortunes, science files).
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "data/tokenizer.h"

namespace {

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

const std::string& Text() {
  static const std::string text = [] {
    std::string all;
    const std::string custom = Env("LLMPLAN_BENCH_TEXT", "");
    std::vector<std::string> files = {custom};
    if (custom.empty()) {
      files.clear();
      for (const char* f : {"computers", "cookie", "definitions", "fortunes", "science"}) {
        files.push_back(std::string("/usr/share/games/fortunes/") + f);
      }
    }
    for (const std::string& f : files) {
      std::ifstream in(f, std::ios::binary);
      all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return all;
  }();
  return text;
}

std::string Path(const std::string& name) {
  return Env("LLMPLAN_TOKENIZERS", LLMPLAN_TOKENIZER_FIXTURES) + "/" + name +
         (name == "llama2" || name == "sp_unigram" ? "/tokenizer.model" : "/tokenizer.json");
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  if (Text().empty()) {
    state.SkipWithError("no text: install Debian's fortunes or set LLMPLAN_BENCH_TEXT");
    return;
  }
  std::unique_ptr<llmplan::data::Tokenizer> tokenizer;
  try {
    tokenizer = llmplan::data::LoadTokenizer(Path(name));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    tokenizer->Encode(Text(), true, &ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(Text().size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}

void BM_Load(benchmark::State& state, const std::string& name) {
  for (auto _ : state) {
    try {
      benchmark::DoNotOptimize(llmplan::data::LoadTokenizer(Path(name)));
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      return;
    }
  }
}

BENCHMARK_CAPTURE(BM_Encode, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, mistral, std::string("mistral"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama2, std::string("llama2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, sp_unigram, std::string("sp_unigram"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK_CAPTURE(BM_Load, llama2, std::string("llama2"))->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
