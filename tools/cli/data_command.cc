// llmplan data prepare: turns text files into a token file for `llmplan run`;
// llmplan data inspect: says what a token file holds.
//
// Tokenizer: byte level. Token = byte value (0..255); 256 = end of text,
// written after every document. Vocabulary 257, so any model with vocab >= 257
// (every preset, including the tiny-* ones) trains on it. It needs no
// tokenizer files, which is the point: a demo or a test runs end to end from a
// Debian package's text. For real training, tokenize with the model's own
// tokenizer (e.g. llm.c's or nanoGPT's prepare scripts) and pass that file.
//
// Output: llm.c's headered .bin (uint16, header records the count) by
// default, or raw uint16 (nanoGPT). Written to a temporary file renamed over
// --out only when complete, so a failure never leaves a partial file there.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "data/token_file.h"
#include "data/token_file_writer.h"
#include "base/user_error.h"
#include "tools/cli/commands.h"

namespace llmplan::cli {

namespace {

constexpr uint16_t kEndOfText = 256;

struct PrepareOptions {
  std::string out;
  std::vector<std::string> inputs;
  std::string format = "llmc";
  std::string separator_line;  // empty: one document per file
};

// Appends one input file's documents; returns how many it ended.
int64_t TokenizeFile(const std::string& path, const std::string& separator_line, data::TokenFileWriter& writer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read input file '" + path + "' (" + std::strerror(errno) + ")");
  int64_t documents = 0;
  bool document_open = false;  // bytes written since the last end-of-text
  auto end_document = [&] {
    if (!document_open) return;  // no empty documents: never two end-of-texts in a row
    writer.Add(kEndOfText);
    ++documents;
    document_open = false;
  };
  if (separator_line.empty()) {
    std::vector<char> chunk(1 << 20);
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      const std::streamsize n = in.gcount();
      for (std::streamsize i = 0; i < n; ++i) writer.Add(static_cast<unsigned char>(chunk[i]));
      if (n > 0) document_open = true;
    }
  } else {
    std::string line;
    while (std::getline(in, line)) {
      const bool had_newline = !in.eof();  // getline stops at '\n' or at the end
      std::string bare = line;
      if (!bare.empty() && bare.back() == '\r') bare.pop_back();
      if (bare == separator_line) {
        end_document();
        continue;
      }
      for (char c : line) writer.Add(static_cast<unsigned char>(c));
      if (had_newline) writer.Add('\n');
      document_open = true;
    }
  }
  if (in.bad()) throw UserError("error reading input file '" + path + "'");
  end_document();
  return documents;
}

void RunPrepare(const PrepareOptions& options) {
  // Check every input before creating anything, so a typo costs nothing.
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
  }
  const std::filesystem::path parent = std::filesystem::path(options.out).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  data::TokenFileWriter writer(options.out, options.format == "llmc", 2);
  int64_t documents = 0;
  for (const std::string& input : options.inputs) documents += TokenizeFile(input, options.separator_line, writer);
  if (writer.count() == 0) throw UserError("the input files hold no text: nothing to write to " + options.out);
  const int64_t tokens = writer.count();
  writer.Commit();
  std::cout << "llmplan: wrote " << tokens << " tokens (" << documents << " documents, byte-level vocab 257) to "
            << options.out << " (" << (options.format == "llmc" ? "llm.c uint16" : "raw uint16") << ")\n";
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
  CLI::App* prepare = data->add_subcommand("prepare", "Tokenize text files into a token file (byte-level tokenizer)");
  prepare->footer(
      "Tokenizer: token = byte value 0..255, 256 = end of text after every document (vocab 257; any model with "
      "vocab >= 257 trains on it). Output: llm.c's headered .bin (magic 20240520, version 1, uint16 tokens, "
      "header[2] = token count) or raw uint16 (nanoGPT). For real training use the model's own tokenizer instead.");
  auto options = std::make_shared<PrepareOptions>();
  prepare->add_option("--out,-o", options->out, "Token file to write (replaced atomically when complete)")
      ->required();
  prepare->add_option("--format", options->format, "Output format: llmc (headered, default) or raw-u16")
      ->check(CLI::IsMember({"llmc", "raw-u16"}));
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
