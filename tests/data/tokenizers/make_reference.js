// Writes reference/corpus.<name>.out: the ids the reference implementations
// give for each case of reference/corpus.txt (cases separated by
// "\n__ggml_vocab_test__\n", one line of " id id ..." per case, the layout of
// llama.cpp's models/ggml-vocab-*.gguf.out).
//   tokenizer.json  Hugging Face tokenizers (npm tokenizers@0.23.2, the Rust
//                   library's Node binding): encode(text, add_special_tokens=false)
//   tokenizer.model sentencepiece (npm @agnai/sentencepiece-js@1.1.1, the C++
//                   library compiled to WebAssembly): EncodeAsIds(text)
// Run from this folder after extracting the fixtures (see README.md):
//   npm install tokenizers@0.23.2 @agnai/sentencepiece-js@1.1.1
//   node make_reference.js /tmp/fixtures
const fs = require('fs');
const path = require('path');

const fixtures = process.argv[2];
const cases = fs.readFileSync(path.join(__dirname, 'reference/corpus.txt'), 'utf8').split('\n__ggml_vocab_test__\n');
cases.pop();

function write(name, idsPerCase) {
  const out = idsPerCase.map((ids) => ids.map((id) => ' ' + id).join('') + '\n').join('');
  fs.writeFileSync(path.join(__dirname, `reference/corpus.${name}.out`), out);
  console.log(name, cases.length, 'cases');
}

(async () => {
  const { Tokenizer } = require('tokenizers');
  for (const name of ['gpt2', 'llama3', 'mistral']) {
    const tok = Tokenizer.fromFile(path.join(fixtures, name, 'tokenizer.json'));
    const all = [];
    for (const text of cases) all.push((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
    write(name, all);
  }
  const { SentencePieceProcessor } = require('@agnai/sentencepiece-js');
  const spp = new SentencePieceProcessor();
  await spp.load(path.join(fixtures, 'llama2', 'tokenizer.model'));
  write('llama2', cases.map((text) => spp.encodeIds(text)));
})();
