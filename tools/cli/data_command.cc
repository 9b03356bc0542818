// llmplan data prepare: turns text files, or conversations to fine-tune on,
// into a token file for `llmplan run`; llmplan data inspect: says what a token
// file (its document index and its loss mask) holds.
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
// JSON Lines: --jsonl reads the files as one JSON object a line, whose "text"
// string (--text-field) is one document; the workers parse the lines.
//
// Documents: every token file is written with its document index beside it
// (data/document_index.h), where each document's first token is, so that
// training can keep attention inside documents.
//
// Conversations: --chat FILE.jsonl renders each line's {"messages": [...]} in
// the model family's chat format (data/chat_format.h), one document each, and
// writes a loss mask beside the token file (data/loss_mask.h) that trains the
// assistant's turns only.
//
// Held-out split: --split FRACTION sends whole documents, chosen by a hash of
// their index, to a second token file; each file keeps input order.
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
#include <nlohmann/json.hpp>

#include "data/chat_format.h"
#include "data/document_index.h"
#include "data/loss_mask.h"
#include "data/token_file.h"
#include "data/token_file_writer.h"
#include "data/tokenizer.h"
#include "base/format.h"
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
  bool jsonl = false;          // the inputs are JSON Lines, a document a line
  std::string text_field = "text";
  bool text_field_given = false;
  std::string chat;            // conversations (JSONL) instead of text files
  std::string chat_format;     // empty: from the tokenizer's special tokens
  bool split_given = false;
  double split = 0;            // the fraction of documents held out
  std::string split_out;       // empty: --out with ".eval" before its extension
};

// A piece of a document: a whole one, or a part split at a line start; with
// --chat or --jsonl, one line of a JSONL file (a whole conversation or
// document).
struct Part {
  Part(std::string text_in, bool start, bool end)
      : text(std::move(text_in)), document_start(start), document_end(end) {}

  std::string text;
  bool document_start;
  bool document_end;
  bool held_out = false;  // goes to the --split file
  std::string where;      // --chat, --jsonl: "FILE:LINE", for messages
};

struct Job {
  std::vector<Part> parts;
  size_t bytes = 0;
};

// What a job gives one output file: ids, with --chat one loss-mask bit per id,
// and where in ids each document begins (ids.size() when a document's first
// part gave no ids: its tokens come in a later job).
struct Encoded {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> trained;
  std::vector<size_t> starts;
};

// How workers turn parts into ids.
struct Encoding {
  const data::Tokenizer& tokenizer;
  const data::ChatRenderer* chat = nullptr;  // --chat: parts are conversations
  const std::string* jsonl_field = nullptr;  // --jsonl: parts are objects whose field is the document
};

struct JobResult {
  Encoded kept;      // for --out
  Encoded held_out;  // for the --split file
  int64_t bytes = 0;
};

constexpr size_t kJobBytes = size_t{2} << 20;
// A document longer than this is split at a line start when the tokenizer
// allows it (so a single huge file neither waits on one thread nor sits in
// memory whole).
constexpr size_t kMaxPartBytes = size_t{8} << 20;

// The document of a --jsonl line: its object's `field` string. Throws
// UserError naming `where` ("FILE:LINE") when the line is not such an object.
std::string JsonlText(const std::string& line, const std::string& field, const std::string& where) {
  const auto fail = [&](const std::string& what) {
    return UserError(where + ": " + what + ": each line must be one JSON object with the document as its \"" +
                     field + "\" string (name another field with --text-field)");
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw fail("not JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  }
  if (!root.is_object()) throw fail(std::string("not a JSON object (") + root.type_name() + ")");
  const auto it = root.find(field);
  if (it == root.end()) throw fail("no \"" + field + "\" field");
  if (!it->is_string()) throw fail("\"" + field + "\" is not a string (" + it->type_name() + ")");
  return std::move(it->get_ref<std::string&>());
}

// Appends one document's text: [bos] ids end-of-text.
void EncodeDocument(const data::Tokenizer& tokenizer, std::string_view text, Encoded& out) {
  out.starts.push_back(out.ids.size());
  if (tokenizer.begin_of_text()) out.ids.push_back(*tokenizer.begin_of_text());
  tokenizer.Encode(text, true, &out.ids);
  out.ids.push_back(tokenizer.end_of_text());
}

JobResult EncodeJob(const Encoding& encoding, const Job& job) {
  const data::Tokenizer& tokenizer = encoding.tokenizer;
  JobResult r;
  r.kept.ids.reserve(job.bytes / 3 + 16);
  for (const Part& part : job.parts) {
    Encoded& out = part.held_out ? r.held_out : r.kept;
    if (encoding.chat != nullptr) {
      out.starts.push_back(out.ids.size());
      encoding.chat->Render(data::ParseChatLine(part.text, part.where), part.where, &out.ids, &out.trained);
    } else if (encoding.jsonl_field != nullptr) {
      const std::string text = JsonlText(part.text, *encoding.jsonl_field, part.where);
      // An empty text is no document, as an empty file is none.
      if (!text.empty()) EncodeDocument(tokenizer, text, out);
    } else if (part.document_start && part.document_end) {
      EncodeDocument(tokenizer, part.text, out);
    } else {
      if (part.document_start) {
        out.starts.push_back(out.ids.size());
        if (tokenizer.begin_of_text()) out.ids.push_back(*tokenizer.begin_of_text());
      }
      tokenizer.Encode(part.text, part.document_start, &out.ids);
      if (part.document_end) out.ids.push_back(tokenizer.end_of_text());
    }
    r.bytes += static_cast<int64_t>(part.text.size());
  }
  return r;
}

// Whether document `index` is held out by --split `fraction`: a hash of the
// index (SplitMix64's finalizer) below the fraction, so that held-out
// documents are spread over the whole corpus, not taken from its end, and the
// same ones on every run.
bool HeldOut(int64_t index, double fraction) {
  uint64_t z = static_cast<uint64_t>(index) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < fraction;
}

// An output file: tokens, its document index, and with --chat its loss mask.
struct Sink {
  data::TokenFileWriter* tokens = nullptr;
  data::DocumentIndexWriter* index = nullptr;
  data::LossMaskWriter* mask = nullptr;
  int64_t documents = 0;
  // A document has begun whose first token is not written yet. A start is
  // recorded at its first token, so a document that gave no tokens records
  // none (two starts at one token would make the index unreadable).
  bool started = false;

  void Write(const Encoded& encoded) {
    size_t next = 0;  // the next of encoded.starts
    for (size_t i = 0; i < encoded.ids.size(); ++i) {
      for (; next < encoded.starts.size() && encoded.starts[next] == i; ++next) started = true;
      if (started) {
        index->StartDocument(tokens->count());
        ++documents;
        started = false;
      }
      tokens->Add(encoded.ids[i]);
    }
    if (next < encoded.starts.size()) started = true;  // a document whose tokens come in the next job
    if (mask != nullptr) {
      for (uint8_t bit : encoded.trained) mask->Add(bit != 0);
    }
  }
};

// Worker threads that live as long as the command: the tokenizers' per-thread
// word caches stay warm from one job to the next (a thread per job would
// start each job cold).
class Workers {
 public:
  Workers(const Encoding& encoding, int threads) : encoding_(encoding) {
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
        [this, job = std::move(job)] { return EncodeJob(encoding_, job); });
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

  const Encoding encoding_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<JobResult()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Reads the inputs into jobs, encodes them on worker threads, and writes the
// ids in order: each output file gets its documents in input order.
class Pipeline {
 public:
  // `held_out`: null without --split.
  Pipeline(const Encoding& encoding, Sink& kept, Sink* held_out, double split, int threads, int64_t total_bytes)
      : tokenizer_(encoding.tokenizer), kept_(kept), held_out_(held_out), split_(split), threads_(threads),
        total_bytes_(total_bytes), workers_(encoding, threads) {}

  // One line of a JSONL file (a conversation, or a --jsonl object) as a whole
  // document; `where` is "FILE:LINE".
  void AddLine(std::string line, std::string where) {
    Part part{std::move(line), true, true};
    part.where = std::move(where);
    Emit(std::move(part));
  }

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
    if (part.document_start) document_held_out_ = held_out_ != nullptr && HeldOut(next_document_++, split_);
    part.held_out = document_held_out_;
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
    kept_.Write(r.kept);
    if (held_out_ != nullptr) held_out_->Write(r.held_out);
    done_bytes_ += r.bytes;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report_ >= std::chrono::seconds(5)) {
      last_report_ = now;
      const double seconds = std::chrono::duration<double>(now - start_).count();
      char line[160];
      std::snprintf(line, sizeof(line), "llmplan: %.1f of %.1f MB, %.1fM tokens, %.1f MB/s\n", done_bytes_ / 1e6,
                    total_bytes_ / 1e6, kept_.tokens->count() / 1e6, done_bytes_ / 1e6 / seconds);
      std::cerr << line << std::flush;
    }
  }

  const data::Tokenizer& tokenizer_;
  Sink& kept_;
  Sink* held_out_;
  const double split_;
  const int threads_;
  const int64_t total_bytes_;
  std::string document_;
  bool document_open_ = false;  // parts of the current document already emitted
  int64_t next_document_ = 0;   // index of the next document to start
  bool document_held_out_ = false;
  Job job_;
  std::deque<std::future<JobResult>> pending_;
  Workers workers_;  // after pending_: destroyed (joined) first
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

// Feeds a JSONL file's lines (--chat conversations, or --jsonl documents) to
// the pipeline, one a line; blank lines are skipped. `option` names the
// option the file was given with, for messages.
void ReadJsonLines(const std::string& path, const std::string& option, Pipeline& pipeline) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read " + option + " file '" + path + "' (" + std::strerror(errno) + ")");
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    pipeline.AddLine(std::move(line), path + ":" + std::to_string(number));
    line = std::string();
  }
  if (in.bad()) throw UserError("error reading " + option + " file '" + path + "'");
}

// "1,234 of 5,678 tokens trained (21.7%)"
std::string TrainedOf(int64_t trained, int64_t tokens) {
  char percent[32];
  std::snprintf(percent, sizeof(percent), " (%.1f%%)", tokens > 0 ? 100.0 * trained / tokens : 0.0);
  return FormatCount(trained) + " of " + FormatCount(tokens) + " tokens trained" + percent;
}

// A fraction as given: 0.05, not 0.050000.
std::string FractionText(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", fraction);
  return text;
}

// The held-out file's default name: `out` with ".eval" before its extension.
std::string DefaultSplitOut(const std::string& out) {
  const std::filesystem::path path(out);
  if (!path.has_extension() || path.stem().empty()) return out + ".eval";
  return (path.parent_path() / (path.stem().string() + ".eval" + path.extension().string())).string();
}

// Checks the combinations of options that cannot work, before any file is read.
void CheckPrepareOptions(const PrepareOptions& options) {
  if (options.jsonl) {
    if (!options.chat.empty()) {
      throw UserError("--jsonl reads documents from the files given, --chat conversations from its file: pass one "
                      "or the other");
    }
    if (!options.separator_line.empty()) {
      throw UserError("--split-on-line applies to text files: with --jsonl each line's \"" + options.text_field +
                      "\" is one document");
    }
    if (options.inputs.empty()) {
      throw UserError("nothing to tokenize: pass the JSON Lines files to read with --jsonl");
    }
    if (options.text_field.empty()) throw UserError("--text-field is empty: name the field that holds the text");
  } else if (options.text_field_given) {
    throw UserError("--text-field " + options.text_field + " needs --jsonl (the inputs as JSON Lines)");
  }
  if (options.chat.empty()) {
    if (options.inputs.empty()) throw UserError("nothing to tokenize: pass text files, or --chat FILE.jsonl");
    if (!options.chat_format.empty()) throw UserError("--chat-format needs --chat FILE.jsonl");
  } else {
    if (!options.inputs.empty()) {
      throw UserError("--chat reads its conversations from " + options.chat + ": pass no text files with it (" +
                      options.inputs[0] + ")");
    }
    if (options.tokenizer.empty()) {
      throw UserError("--chat needs --tokenizer (the model's tokenizer.json or tokenizer.model): the byte-level "
                      "tokenizer has no special tokens to render a chat format with");
    }
    if (!options.eot_token.empty()) {
      throw UserError("--eot-token applies to text files: with --chat each conversation ends with its chat format's "
                      "end token");
    }
    if (!options.separator_line.empty()) throw UserError("--split-on-line applies to text files, not to --chat");
  }
  if (options.split_given && !(options.split > 0 && options.split < 1)) {
    throw UserError("--split " + FractionText(options.split) +
                    ": give the fraction of documents to hold out, between 0 and 1 (e.g. 0.05)");
  }
  if (!options.split_given && !options.split_out.empty()) throw UserError("--split-out needs --split FRACTION");
}

void RunPrepare(const PrepareOptions& options) {
  CheckPrepareOptions(options);
  const bool chat = !options.chat.empty();
  const std::vector<std::string> inputs = chat ? std::vector<std::string>{options.chat} : options.inputs;
  const std::string split_out =
      !options.split_given ? "" : options.split_out.empty() ? DefaultSplitOut(options.out) : options.split_out;
  if (!split_out.empty() && split_out == options.out) {
    throw UserError("--split-out " + split_out + " is also --out: write the held-out tokens elsewhere");
  }
  // Check every input before creating anything, so a typo costs nothing.
  int64_t total_bytes = 0;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const auto status = std::filesystem::status(input, ec);
    if (!std::filesystem::exists(status)) throw UserError("input file '" + input + "' not found");
    if (std::filesystem::is_directory(status)) {
      throw UserError("input '" + input + "' is a directory: pass the text files in it (e.g. " + input + "/*)");
    }
    for (const std::string& out : {options.out, split_out}) {
      if (!out.empty() && std::filesystem::exists(out) && std::filesystem::equivalent(input, out, ec)) {
        throw UserError("input '" + input + "' is also an output (" + out + "): write the token file elsewhere");
      }
    }
    const auto size = std::filesystem::file_size(input, ec);
    if (!ec) total_bytes += static_cast<int64_t>(size);
  }
  const std::unique_ptr<data::Tokenizer> tokenizer =
      options.tokenizer.empty() ? data::ByteTokenizer() : data::LoadTokenizer(options.tokenizer, options.eot_token);
  if (options.tokenizer.empty() && !options.eot_token.empty()) {
    throw UserError("--eot-token needs --tokenizer (the byte-level tokenizer's end of text is 256)");
  }
  std::unique_ptr<data::ChatRenderer> renderer;
  if (chat) {
    const data::ChatFormat format = options.chat_format.empty() ? data::DetectChatFormat(*tokenizer)
                                                                : data::ParseChatFormat(options.chat_format);
    renderer = std::make_unique<data::ChatRenderer>(*tokenizer, format);
  }
  const bool wide = tokenizer->vocab_size() > 65536;
  if (wide && options.format == "raw-u16") {
    throw UserError("the tokenizer's vocabulary (" + std::to_string(tokenizer->vocab_size()) +
                    " ids) needs 4-byte tokens: use --format llmc or raw-u32");
  }
  const int token_bytes = (wide || options.format == "raw-u32") ? 4 : 2;
  const bool llmc = options.format == "llmc";
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  for (const std::string& out : {options.out, split_out}) {
    const std::filesystem::path parent = std::filesystem::path(out).parent_path();
    std::error_code ec;
    if (!out.empty() && !parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  const auto start = std::chrono::steady_clock::now();
  // Every file is written to a temporary and renamed only once all are
  // complete: an error leaves none of them behind.
  data::TokenFileWriter writer(options.out, llmc, token_bytes);
  data::DocumentIndexWriter index(data::DocumentIndexPathFor(options.out));
  std::unique_ptr<data::LossMaskWriter> mask;
  std::unique_ptr<data::TokenFileWriter> split_writer;
  std::unique_ptr<data::DocumentIndexWriter> split_index;
  std::unique_ptr<data::LossMaskWriter> split_mask;
  if (chat) mask = std::make_unique<data::LossMaskWriter>(data::LossMaskPathFor(options.out));
  if (!split_out.empty()) {
    split_writer = std::make_unique<data::TokenFileWriter>(split_out, llmc, token_bytes);
    split_index = std::make_unique<data::DocumentIndexWriter>(data::DocumentIndexPathFor(split_out));
    if (chat) split_mask = std::make_unique<data::LossMaskWriter>(data::LossMaskPathFor(split_out));
  }
  Sink kept{&writer, &index, mask.get()};
  Sink held_out{split_writer.get(), split_index.get(), split_mask.get()};
  {
    const Encoding encoding{*tokenizer, renderer.get(), options.jsonl ? &options.text_field : nullptr};
    Pipeline pipeline(encoding, kept, split_writer ? &held_out : nullptr, options.split, threads, total_bytes);
    if (chat) {
      ReadJsonLines(options.chat, "--chat", pipeline);
    } else if (options.jsonl) {
      for (const std::string& input : inputs) ReadJsonLines(input, "--jsonl", pipeline);
    } else {
      for (const std::string& input : inputs) ReadFile(input, options.separator_line, pipeline);
    }
    pipeline.Finish();
  }
  const int64_t documents = kept.documents + held_out.documents;
  if (documents == 0) {
    throw UserError(chat ? options.chat + " holds no conversations: nothing to write to " + options.out
                         : "the input files hold no text: nothing to write to " + options.out);
  }
  if (split_writer && (kept.documents == 0 || held_out.documents == 0)) {
    throw UserError("--split " + FractionText(options.split) + " holds out " + std::to_string(held_out.documents) +
                    " of the " + std::to_string(documents) + " documents, leaving " +
                    (kept.documents == 0 ? options.out : split_out) +
                    " without one: change the fraction or add documents");
  }
  writer.Commit();
  index.Commit(writer.count());
  if (mask) mask->Commit();
  if (split_writer) {
    split_writer->Commit();
    split_index->Commit(split_writer->count());
  }
  if (split_mask) split_mask->Commit();
  if (!chat) {
    // A mask from an earlier --chat run describes other tokens: the loader
    // would refuse it (or, with the same count, train on the wrong bits).
    for (const std::string& out : {options.out, split_out}) {
      std::error_code ec;
      if (!out.empty()) std::filesystem::remove(data::LossMaskPathFor(out), ec);
    }
  }

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string width = token_bytes == 2 ? "uint16" : "uint32";
  char rate[96];
  std::snprintf(rate, sizeof(rate), seconds < 10 ? " in %.2f s (%.1f MB/s, %d thread%s)" : " in %.0f s (%.1f MB/s, %d thread%s)", seconds,
                seconds > 0 ? total_bytes / 1e6 / seconds : 0.0, threads, threads == 1 ? "" : "s");
  std::cout << "llmplan: wrote " << writer.count() << " tokens (" << kept.documents << " documents, "
            << tokenizer->description() << ") to " << options.out << " (" << (llmc ? "llm.c " : "raw ") << width
            << ")";
  if (split_writer) {
    std::cout << " and " << split_writer->count() << " tokens (" << held_out.documents << " documents held out by --split "
              << FractionText(options.split) << ") to " << split_out;
  }
  std::cout << rate << "\n";
  if (chat) {
    std::cout << "llmplan: chat format " << data::ChatFormatName(renderer->format()) << "; loss mask "
              << data::LossMaskPathFor(options.out) << ": " << TrainedOf(mask->trained(), mask->count());
    if (split_mask) {
      std::cout << "; " << data::LossMaskPathFor(split_out) << ": " << TrainedOf(split_mask->trained(), split_mask->count());
    }
    std::cout << "\n";
  }
}

// `llmplan data inspect`: what the loader will see — format, token count,
// largest id (so the model's vocab can be checked before a run starts), and
// the document index and loss mask beside the file when there are.
void RunInspect(const std::string& path, const std::string& format) {
  const data::TokenFile file(path, data::ParseTokenFileFormat(format));
  std::vector<int64_t> chunk(1 << 20);
  uint32_t max_id = 0;
  for (int64_t begin = 0; begin < file.size(); begin += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), file.size() - begin);
    max_id = std::max(max_id, file.Read(begin, n, chunk.data()));
  }
  // The sidecars of the file the loader reads (a Megatron prefix resolves to
  // its .bin); both are read before anything is printed, so that a broken one
  // is the only line.
  std::string documents_line;
  const std::string index_path = data::DocumentIndexPathFor(file.path());
  std::error_code ec;
  if (std::filesystem::exists(index_path, ec)) {
    const data::DocumentIndex index(index_path, file.size());
    int64_t longest = 0;
    for (int64_t i = 0; i < index.documents(); ++i) longest = std::max(longest, index.Length(i));
    const int64_t mean = (index.tokens() + index.documents() / 2) / index.documents();
    documents_line = "documents: " + FormatCount(index.documents()) + " (mean " + FormatCount(mean) + " tokens, longest " +
                     FormatCount(longest) + ")\n";
  }
  std::string mask_line;
  const std::string mask_path = data::LossMaskPathFor(file.path());
  if (std::filesystem::exists(mask_path, ec)) {
    const data::LossMaskFile mask(mask_path, file.size());
    mask_line = "loss mask: " + TrainedOf(mask.trained(), mask.size()) + " (" + mask_path + ")\n";
  }
  std::cout << path << ": format " << data::TokenFileFormatName(file.format()) << ", " << file.size()
            << " tokens of " << file.token_bytes() << " bytes, largest id " << max_id << " (needs vocab >= "
            << static_cast<int64_t>(max_id) + 1 << ")\n"
            << documents_line << mask_line;
}

}  // namespace

void AddDataCommand(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Prepare and inspect token files for llmplan run");
  data->require_subcommand(1);
  CLI::App* prepare = data->add_subcommand("prepare", "Tokenize text files, or conversations to fine-tune on, into a token file");
  prepare->footer(
      "Tokenizer: --tokenizer PATH takes a Hugging Face tokenizer.json (BPE: GPT-2, Llama 3, Qwen2, Mistral) or a "
      "SentencePiece tokenizer.model (BPE: Llama 2; unigram: T5-style); each document becomes [bos] tokens "
      "end-of-text. Without it, "
      "byte level: token = byte value 0..255, 256 = end of text after every document (vocab 257; any model with "
      "vocab >= 257 trains on it). Output: llm.c's headered .bin (magic 20240520, uint16 tokens; magic 20240801, "
      "uint32 tokens when the vocabulary exceeds 65,536) or raw uint16/uint32 (nanoGPT). "
      "Fine-tuning: --chat FILE.jsonl takes one conversation a line ({\"messages\": [{\"role\": \"system\"|\"user\"|"
      "\"assistant\", \"content\": \"...\"}]}), renders it in the model's chat format and writes OUT.lossmask "
      "beside OUT: only the assistant's turns are trained (docs/DATA.md). "
      "Documents: every token file is written with OUT.docs beside it, where each document begins, for "
      "llmplan run --attention documents.");
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
  prepare->add_flag("--jsonl", options->jsonl,
                    "The files are JSON Lines: each line is one JSON object whose \"text\" string is one "
                    "document (blank lines are skipped)");
  CLI::Option* text_field = prepare->add_option("--text-field", options->text_field,
                                                "With --jsonl, the field that holds each document's text (default: "
                                                "text)");
  prepare->add_option("--chat", options->chat,
                      "Conversations to fine-tune on, one JSON object a line ({\"messages\": [...]}, OpenAI's "
                      "layout), instead of text files; needs --tokenizer");
  prepare->add_option("--chat-format", options->chat_format,
                      "Chat format of the model: llama3, chatml (Qwen2) or mistral (default: from the tokenizer's "
                      "special tokens)")
      ->check(CLI::IsMember({"llama3", "chatml", "mistral"}));
  CLI::Option* split = prepare->add_option(
      "--split", options->split,
      "Hold out this fraction of the documents (0 < FRACTION < 1), chosen by a hash of their index, in a second "
      "token file");
  prepare->add_option("--split-out", options->split_out,
                      "Held-out token file (default: --out with .eval before its extension, train.bin -> "
                      "train.eval.bin)");
  prepare->add_option("files", options->inputs, "Text files (with --jsonl, JSON Lines files) to tokenize, in order");
  prepare->callback([options, split, text_field] {
    options->split_given = split->count() > 0;
    options->text_field_given = text_field->count() > 0;
    RunPrepare(*options);
  });

  CLI::App* inspect = data->add_subcommand(
      "inspect",
      "Print a token file's format, token count and largest id, its documents, and its loss mask's trained tokens");
  auto inspect_path = std::make_shared<std::string>();
  auto inspect_format = std::make_shared<std::string>("auto");
  inspect->add_option("file", *inspect_path, "Token file")->required();
  inspect->add_option("--data-format", *inspect_format,
                      "Token file format: auto (default), u16, u32, llmc or megatron");
  inspect->callback([inspect_path, inspect_format] { RunInspect(*inspect_path, *inspect_format); });
}

}  // namespace llmplan::cli
