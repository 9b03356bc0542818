// libFuzzer target: the tokenizer loaders (llmplan data prepare --tokenizer)
// and the pre-tokenizer regex engine. Any bytes: a tokenizer that encodes and
// decodes, or a UserError, nothing else. The first byte picks what the rest is:
//   0  a tokenizer.json          1  a SentencePiece .model
//   2  a regex, then after the first NUL a text to search
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/user_error.h"
#include "data/regex.h"
#include "data/tokenizer.h"
#include "data/tokenizer_parts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 3 == 2) {
      const size_t nul = rest.find('\0');
      const llmplan::data::Regex regex(rest.substr(0, nul), "fuzz");
      const std::string text = nul == std::string::npos ? "Hello world's 123  \n\n x" : rest.substr(nul + 1);
      size_t from = 0, b, e;
      while (regex.Find(text, from, &b, &e)) {
        if (b < from || e <= b || e > text.size()) __builtin_trap();
        from = e;
      }
      return 0;
    }
    const auto tokenizer = data[0] % 3 == 0 ? llmplan::data::internal::LoadHfTokenizer("fuzz.json", rest, "")
                                            : llmplan::data::internal::LoadSentencePiece("fuzz.model", rest, "");
    std::vector<uint32_t> ids;
    for (const char* text : {"Hello world", " x\n\ty  <s> \xff\xc3", ""}) {
      tokenizer->Encode(text, true, &ids);
      tokenizer->Encode(text, false, &ids);
    }
    for (uint32_t id : ids) {
      if (id >= tokenizer->vocab_size()) __builtin_trap();  // ids stay inside the vocabulary
    }
    (void)tokenizer->Decode(ids);
  } catch (const llmplan::UserError&) {
  }
  return 0;
}
