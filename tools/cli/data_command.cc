// llmplan data prepare: turns text files into a token file for `llmplan run`;
// llmplan data inspect: says what a token file holds.
//
// Tokenizer: --tokenizer PATH (a Hugging Face tokenizer.json or a SentencePiece
// tokenizer.model, data/tokenizer.h) gives the model's own ids; each document
// is [bos] ids end-of-text, bos only when the tokenizer adds one. Without it,
// byte level: token = byte value (0..255), 256 = end of text, vocab 257, so any
// model with vocab >= 257 (every preset, including the tiny-* ones) trains on
// it with no tokenizer files: a demo or a test runs end to end from a Debian
// package's text.
//
// Work: documents (and pieces of large ones, split at line starts where the
// tokenizer allows, data/tokenizer.h) are batched into jobs of ~2 MiB that
// --threads workers encode; the tokens are written in input order. A line on
// stderr every 5 s says how far it is; the closing line's time and MB/s are
// those of reading, encoding and writing (loading the tokenizer excluded).
//
// Output: llm.c's headered .bin by default (uint16, or uint32 with its
// Llama-3 header when the vocabulary exceeds 65,536 ids), or raw uint16 /
// uint32 (nanoGPT). Written to a temporary file renamed over --out only when
// complete, so a failure never leaves a partial file there.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "data/token_file.h"
#include "data/token_file_writer.h"
#include "data/tokenizer.h"
#include "base/user_error.h"
#include "tools/cli/commands.h"

namespace llmplan::cli {

namespace {

struct PrepareOptions {
  std::string out;
  std::vector<std::string> inputs;
  std::string format = "llmc";
  std::string separator_line;  // empty: one document per file
  std::string tokenizer;       // empty: byte level
  std::string eot_token;
  int threads = 0;             // 0: one per core
};

// A piece of a document: a whole one, or a part split at a line start.
struct Part {
  std::string text;
  bool document_start;
  bool document_end;
};

struct Job {
  std::vector<Part> parts;
  size_t bytes = 0;
};

struct JobResult {
  std::vector<uint32_t> ids;
  int64_t documents = 0;
  int64_t bytes = 0;
};

constexpr size_t kJobBytes = size_t{2} << 20;
// A document longer than this is split at a line start when the tokenizer
// allows it (so a single huge file neither waits on one thread nor sits in
// memory whole).
constexpr size_t kMaxPartBytes = size_t{8} << 20;

JobResult EncodeJob(const data::Tokenizer& tokenizer, const Job& job) {
  JobResult r;
  r.ids.reserve(job.bytes / 3 + 16);
  for (const Part& part : job.parts) {
    if (part.document_start && tokenizer.begin_of_text()) r.ids.push_back(*tokenizer.begin_of_text());
    tokenizer.Encode(part.text, part.document_start, &r.ids);
    if (part.document_end) {
      r.ids.push_back(tokenizer.end_of_text());
      ++r.documents;
    }
    r.bytes += static_cast<int64_t>(part.text.size());
  }
  return r;
}

// Worker threads that live as long as the command: the tokenizers' per-thread
// word caches stay warm from one job to the next (a thread per job would
// start each job cold).
class Workers {
 public:
  Workers(const data::Tokenizer& tokenizer, int threads) : tokenizer_(tokenizer) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  std::future<JobResult> Submit(Job job) {
    std::packaged_task<JobResult()> task(
        [this, job = std::move(job)] { return EncodeJob(tokenizer_, job); });
    std::future<JobResult> result = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    ready_.notify_one();
    return result;
  }

 private:
  void Work() {
    for (;;) {
      std::packaged_task<JobResult()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // an exception (a UserError) reaches the future
    }
  }

  const data::Tokenizer& tokenizer_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<JobResult()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Reads the inputs into jobs, encodes them on worker threads, and writes the
// ids in order.
class Pipeline {
 public:
  Pipeline(const data::Tokenizer& tokenizer, data::TokenFileWriter& writer, int threads, int64_t total_bytes)
      : tokenizer_(tokenizer), writer_(writer), threads_(threads), total_bytes_(total_bytes),
        workers_(tokenizer, threads) {}

  // Appends text to the open document (opening one if none is).
  void AddText(const char* data, size_t n) {
    if (n == 0) return;
    document_.append(data, n);
    if (document_.size() >= kMaxPartBytes && tokenizer_.line_splittable()) SplitOpenDocument();
  }
  // Ends the open document; nothing when it is empty (never two end-of-texts in a row).
  void EndDocument() {
    if (document_.empty() && !document_open_) return;
    Emit({std::move(document_), !document_open_, true});
    document_.clear();
    document_open_ = false;
  }
  void Finish() {
    EndDocument();
    if (!job_.parts.empty()) Submit();
    while (!pending_.empty()) WriteOldest();
  }
  int64_t documents() const { return documents_; }

 private:
  // Emits the open document up to its last line start that begins with an
  // ASCII letter, keeping the rest open.
  void SplitOpenDocument() {
    for (size_t nl = document_.rfind('\n', document_.size() - 2); nl != std::string::npos && nl > 0;
         nl = document_.rfind('\n', nl - 1)) {
      const char c = document_[nl + 1];
      if ((c | 32) >= 'a' && (c | 32) <= 'z') {
        Emit({document_.substr(0, nl + 1), !document_open_, false});
        document_.erase(0, nl + 1);
        document_open_ = true;
        return;
      }
      if (document_.size() - nl > kMaxPartBytes) return;  // none in the last piece's worth: read on
    }
  }
  void Emit(Part part) {
    job_.bytes += part.text.size();
    job_.parts.push_back(std::move(part));
    if (job_.bytes >= kJobBytes) Submit();
  }
  void Submit() {
    // Two jobs per thread in flight: workers never wait on the reader.
    while (static_cast<int>(pending_.size()) >= 2 * threads_) WriteOldest();
    pending_.push_back(workers_.Submit(std::move(job_)));
    job_ = Job();
  }
  void WriteOldest() {
    JobResult r = pending_.front().get();
    pending_.pop_front();
    for (uint32_t id : r.ids) writer_.Add(id);
    documents_ += r.documents;
    done_bytes_ += r.bytes;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report_ >= std::chrono::seconds(5)) {
      last_report_ = now;
      const double seconds = std::chrono::duration<double>(now - start_).count();
      char line[160];
      std::snprintf(line, sizeof(line), "llmplan: %.1f of %.1f MB, %.1fM tokens, %.1f MB/s\n", done_bytes_ / 1e6,
                    total_bytes_ / 1e6, writer_.count() / 1e6, done_bytes_ / 1e6 / seconds);
      std::cerr << line << std::flush;
    }
  }

  const data::Tokenizer& tokenizer_;
  data::TokenFileWriter& writer_;
  const int threads_;
  const int64_t total_bytes_;
  std::string document_;
  bool document_open_ = false;  // parts of the current document already emitted
  Job job_;
  std::deque<std::future<JobResult>> pending_;
  Workers workers_;  // after pending_: destroyed (joined) first
  int64_t documents_ = 0;
  int64_t done_bytes_ = 0;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_report_ = start_;
};

// Feeds one input file's documents to the pipeline.
void ReadFile(const std::string& path, const std::string& separator_line, Pipeline& pipeline) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read input file '" + path + "' (" + std::strerror(errno) + ")");
  if (separator_line.empty()) {
    std::vector<char> chunk(1 << 20);
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      pipeline.AddText(chunk.data(), static_cast<size_t>(in.gcount()));
    }
  } else {
    std::string line;
    while (std::getline(in, line)) {
      const bool had_newline = !in.eof();  // getline stops at '\n' or at the end
      std::string_view bare = line;
      if (!bare.empty() && bare.back() == '\r') bare.remove_suffix(1);
      if (bare == separator_line) {
        pipeline.EndDocument();
        continue;
      }
      if (had_newline) line.push_back('\n');
      pipeline.AddText(line.data(), line.size());
    }
  }
  if (in.bad()) throw UserError("error reading input file '" + path + "'");
  pipeline.EndDocument();
}

void RunPrepare(const PrepareOptions& options) {
  // Check every input before creating anything, so a typo costs nothing.
  int64_t total_bytes = 0;
  for (const std::string& input : options.inputs) {
    std::error_code ec;
    const auto status = std::filesystem::status(input, ec);
    if (!std::filesystem::exists(status)) throw UserError("input file '" + input + "' not found");
    if (std::filesystem::is_directory(status)) {
      throw UserError("input '" + input + "' is a directory: pass the text files in it (e.g. " + input + "/*)");
    }
    if (std::filesystem::exists(options.out) && std::filesystem::equivalent(input, options.out, ec)) {
      throw UserError("input '" + input + "' is also --out: write the token file elsewhere");
    }
    const auto size = std::filesystem::file_size(input, ec);
    if (!ec) total_bytes += static_cast<int64_t>(size);
  }
  const std::unique_ptr<data::Tokenizer> tokenizer =
      options.tokenizer.empty() ? data::ByteTokenizer() : data::LoadTokenizer(options.tokenizer, options.eot_token);
  if (options.tokenizer.empty() && !options.eot_token.empty()) {
    throw UserError("--eot-token needs --tokenizer (the byte-level tokenizer's end of text is 256)");
  }
  const bool wide = tokenizer->vocab_size() > 65536;
  if (wide && options.format == "raw-u16") {
    throw UserError("the tokenizer's vocabulary (" + std::to_string(tokenizer->vocab_size()) +
                    " ids) needs 4-byte tokens: use --format llmc or raw-u32");
  }
  const int token_bytes = (wide || options.format == "raw-u32") ? 4 : 2;
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  const std::filesystem::path parent = std::filesystem::path(options.out).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const auto start = std::chrono::steady_clock::now();
  data::TokenFileWriter writer(options.out, options.format == "llmc", token_bytes);
  Pipeline pipeline(*tokenizer, writer, threads, total_bytes);
  for (const std::string& input : options.inputs) ReadFile(input, options.separator_line, pipeline);
  pipeline.Finish();
  if (writer.count() == 0) throw UserError("the input files hold no text: nothing to write to " + options.out);
  const int64_t tokens = writer.count();
  writer.Commit();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string width = token_bytes == 2 ? "uint16" : "uint32";
  char rate[96];
  std::snprintf(rate, sizeof(rate), seconds < 10 ? " in %.2f s (%.1f MB/s, %d thread%s)" : " in %.0f s (%.1f MB/s, %d thread%s)", seconds,
                seconds > 0 ? total_bytes / 1e6 / seconds : 0.0, threads, threads == 1 ? "" : "s");
  std::cout << "llmplan: wrote " << tokens << " tokens (" << pipeline.documents() << " documents, "
            << tokenizer->description() << ") to " << options.out << " ("
            << (options.format == "llmc" ? "llm.c " : "raw ") << width << ")" << rate << "\n";
}

// `llmplan data inspect`: what the loader will see — format, token count,
// largest id (so the model's vocab can be checked before a run starts).
void RunInspect(const std::string& path, const std::string& format) {
  const data::TokenFile file(path, data::ParseTokenFileFormat(format));
  std::vector<int64_t> chunk(1 << 20);
  uint32_t max_id = 0;
  for (int64_t begin = 0; begin < file.size(); begin += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), file.size() - begin);
    max_id = std::max(max_id, file.Read(begin, n, chunk.data()));
  }
  std::cout << path << ": format " << data::TokenFileFormatName(file.format()) << ", " << file.size()
            << " tokens of " << file.token_bytes() << " bytes, largest id " << max_id << " (needs vocab >= "
            << static_cast<int64_t>(max_id) + 1 << ")\n";
}

}  // namespace

void AddDataCommand(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Prepare and inspect token files for llmplan run");
  data->require_subcommand(1);
  CLI::App* prepare = data->add_subcommand("prepare", "Tokenize text files into a token file");
  prepare->footer(
      "Tokenizer: --tokenizer PATH takes a Hugging Face tokenizer.json (BPE: GPT-2, Llama 3, Qwen2, Mistral) or a "
      "SentencePiece tokenizer.model (BPE: Llama 2; unigram: T5-style); each document becomes [bos] tokens "
      "end-of-text. Without it, "
      "byte level: token = byte value 0..255, 256 = end of text after every document (vocab 257; any model with "
      "vocab >= 257 trains on it). Output: llm.c's headered .bin (magic 20240520, uint16 tokens; magic 20240801, "
      "uint32 tokens when the vocabulary exceeds 65,536) or raw uint16/uint32 (nanoGPT).");
  auto options = std::make_shared<PrepareOptions>();
  prepare->add_option("--out,-o", options->out, "Token file to write (replaced atomically when complete)")
      ->required();
  prepare->add_option("--tokenizer", options->tokenizer,
                      "tokenizer.json or tokenizer.model of the model to train (default: byte level, vocab 257)");
  prepare->add_option("--eot-token", options->eot_token,
                      "Token written after every document (default: the tokenizer's end of text, e.g. "
                      "<|end_of_text|>, <|endoftext|>, </s>)");
  prepare->add_option("--format", options->format,
                      "Output format: llmc (headered, default; uint32 for vocabularies over 65,536), raw-u16 or raw-u32")
      ->check(CLI::IsMember({"llmc", "raw-u16", "raw-u32"}));
  prepare->add_option("--threads", options->threads, "Encoding threads (default: one per core)")
      ->check(CLI::Range(1, 1024));
  prepare->add_option("--split-on-line", options->separator_line,
                      "Also end a document at every line that is exactly this text (dropped), e.g. % for "
                      "fortune files; by default each file is one document");
  prepare->add_option("files", options->inputs, "Text files to tokenize, in order")->required();
  prepare->callback([options] { RunPrepare(*options); });

  CLI::App* inspect = data->add_subcommand("inspect", "Print a token file's format, token count and largest id");
  auto inspect_path = std::make_shared<std::string>();
  auto inspect_format = std::make_shared<std::string>("auto");
  inspect->add_option("file", *inspect_path, "Token file")->required();
  inspect->add_option("--data-format", *inspect_format,
                      "Token file format: auto (default), u16, u32, llmc or megatron");
  inspect->callback([inspect_path, inspect_format] { RunInspect(*inspect_path, *inspect_format); });
}

}  // namespace llmplan::cli
