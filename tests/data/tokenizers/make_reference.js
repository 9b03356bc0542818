// Writes reference/corpus.<name>.out: the ids the reference implementations
// give for each case of reference/corpus.txt (cases separated by
// "\n__ggml_vocab_test__\n", one line of " id id ..." per case, the layout of
// llama.cpp's models/ggml-vocab-*.gguf.out), and for the unigram model, which
// llama.cpp has no ids for, reference/llamacpp-inputs.sp_unigram.out for
// llamacpp/ggml-vocab.gguf.inp.
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
function readCases(file) {
  const cases = fs.readFileSync(path.join(__dirname, file), 'utf8').split('\n__ggml_vocab_test__\n');
  cases.pop();
  return cases;
}
const cases = readCases('reference/corpus.txt');

function write(name, idsPerCase, file = `reference/corpus.${name}.out`) {
  const out = idsPerCase.map((ids) => ids.map((id) => ' ' + id).join('') + '\n').join('');
  fs.writeFileSync(path.join(__dirname, file), out);
  console.log(file, idsPerCase.length, 'cases');
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
  const unigram = new SentencePieceProcessor();
  await unigram.load(path.join(fixtures, 'sp_unigram', 'tokenizer.model'));
  write('sp_unigram', cases.map((text) => unigram.encodeIds(text)));
  write('sp_unigram', readCases('llamacpp/ggml-vocab.gguf.inp').map((text) => unigram.encodeIds(text)),
        'reference/llamacpp-inputs.sp_unigram.out');
})();
