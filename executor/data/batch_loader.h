// BatchLoader: training micro-batches from a token file, prepared ahead of time
// on background threads (workers) so the GPU never waits on the host.
//
// The sampling scheme (a pure function of plain integers, so a run can resume
// exactly and re-shard across a different number of GPUs):
//
//   windows   The file is cut into W = (tokens - 1) / seq_len windows; window w
//             is tokens [w*seq_len, w*seq_len + seq_len + 1). Consecutive
//             windows share one token, so every token after the first is a
//             target exactly once per epoch (llm.c's layout). The tail that
//             does not fill a window is never used.
//   samples   Global sample s (counting from 0 over the whole run, all ranks)
//             reads window order(s mod W) of epoch s / W. order is the
//             identity without shuffling, else a seeded pseudo-random
//             permutation of [0, W) that changes every epoch (a Feistel
//             network with cycle-walking: O(1) memory, same on every host).
//   ranks     One micro-batch call consumes world * micro_batch global samples:
//             rank r gets rows s0 + r*micro_batch + j, j in [0, micro_batch),
//             where s0 = DataPosition::next_sample.
//
// DataPosition::next_sample counts global samples and does not depend on the
// world size: save it with a checkpoint, restart on any number of GPUs with
// the same (world * micro_batch) and the run sees exactly the same sample
// stream — and with another (world * micro_batch) it still never repeats or
// skips a sample.
//
// Every token id >= vocab is a UserError naming the file and the offset, found
// on the host before the batch reaches a kernel (an out-of-range embedding
// index on the GPU is a device-side assert that kills the whole run): the
// constructor scans every token a sample can read before the first step
// (TokenFile::FindTokenAtLeast: 0.3 s per GB from the page cache; a cold
// file is read once from disk),
// and each batch is checked again as it is read.
//
// A loss mask beside the file (TOKENFILE.lossmask, data/loss_mask.h) is read
// with it: each target the mask does not train carries kUntrainedTarget
// (micro_batch.h). With document attention (BatchLoaderOptions::
// document_attention) the document index beside it (TOKENFILE.docs,
// data/document_index.h) marks each token that begins a document with
// kDocumentStart.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/document_index.h"
#include "data/loss_mask.h"
#include "data/token_file.h"
#include "executor/data/micro_batch.h"

namespace llmplan::data {

// Where the data stream stands. Plain integers: store it in a checkpoint.
struct DataPosition {
  int64_t next_sample = 0;  // global samples (all ranks together) consumed so far
};

// The pure mapping global sample index -> first token of its window.
class SampleOrder {
 public:
  // REQUIRES: num_tokens > seq_len >= 1 (at least one window).
  SampleOrder(int64_t num_tokens, int64_t seq_len, uint64_t seed, bool shuffle);

  int64_t num_windows() const { return num_windows_; }
  int64_t seq_len() const { return seq_len_; }
  // Epoch of global sample `sample` (0 for the first pass over the data).
  int64_t Epoch(int64_t sample) const { return sample / num_windows_; }
  // Window read by global sample `sample`.
  // REQUIRES: sample >= 0.
  int64_t Window(int64_t sample) const;
  // Index of the first token of that window; the sample is the seq_len + 1
  // tokens starting there.
  int64_t FirstToken(int64_t sample) const { return Window(sample) * seq_len_; }

 private:
  int64_t num_tokens_;
  int64_t seq_len_;
  int64_t num_windows_;
  uint64_t seed_;
  bool shuffle_;
  int half_bits_;  // Feistel halves; the domain is 2^(2*half_bits_) >= num_windows_
};

// Reads micro_batch samples starting at global sample `first_sample` into a
// [micro_batch, seq_len + 1] int64 tensor (page-locked when pin_memory, so the
// host-to-device copy can be asynchronous).
// REQUIRES: first_sample >= 0, micro_batch >= 1, vocab >= 1, pin_memory only
// when CUDA is available. Throws UserError naming the file and the token and
// byte offsets of the first id >= vocab.
// `mask` and `documents` (each may be null): MarkWindow's.
at::Tensor ReadSamples(const TokenFile& file, const SampleOrder& order, int64_t first_sample,
                          int64_t micro_batch, int64_t vocab, bool pin_memory, const LossMaskFile* mask = nullptr,
                          const DocumentIndex* documents = nullptr);

// Sets the micro-batch bits (micro_batch.h) of one window: ids[k] is token
// begin + k of the file, k in [0, length). Targets `mask` does not train get
// kUntrainedTarget (the first token is an input only); tokens that begin one
// of `documents` get kDocumentStart. Either may be null.
// REQUIRES: begin + length <= the file's tokens.
void MarkWindow(int64_t begin, int64_t length, const LossMaskFile* mask, const DocumentIndex* documents,
                int64_t* ids);

struct BatchLoaderOptions {
  std::string path;                                 // token file (see token_file.h)
  TokenFileFormat format = TokenFileFormat::kAuto;
  int64_t seq_len = 0;      // tokens per sample fed to the model (inputs); the row holds seq_len + 1
  int64_t micro_batch = 0;  // rows per micro-batch on this rank
  int rank = 0;             // this process among `world` data-parallel ranks
  int world = 1;
  int64_t vocab = 0;        // ids >= vocab are errors
  uint64_t seed = 0;        // permutation seed (same on every rank)
  bool shuffle = true;      // false: windows in file order (tests, curriculum data)
  // Micro-batches read ahead: ready or being read, at most this many at once.
  int prefetch = 4;
  // Threads reading micro-batches, each a whole one at a time; Next() hands
  // them out in order whichever finishes first. More than one helps when one
  // thread cannot read a micro-batch within a step (a slow or remote disk,
  // large rows). REQUIRES: 1 <= workers <= prefetch (a worker only reads what
  // prefetch leaves room for, so more would sit idle).
  int workers = 1;
  // Mark document starts (kDocumentStart) from the index beside the file:
  // the run keeps attention inside documents. The index must exist.
  bool document_attention = false;
};

// One micro-batch for this rank.
struct TokenBatch {
  // [micro_batch, seq_len + 1] int64 on the CPU, pinned when CUDA is
  // available. inputs = tokens.slice(1, 0, -1), targets = tokens.slice(1, 1).
  at::Tensor tokens;
  int64_t first_sample = 0;  // global sample index of this rank's row 0
  DataPosition next;         // position after this micro-batch (all ranks)
};

class BatchLoader {
 public:
  // Opens the file, checks every token id a sample can read against
  // options.vocab, and starts the workers at `start`.
  // REQUIRES: nothing. Throws UserError (on this thread) for bad options, an
  // unreadable or malformed file, a file shorter than seq_len + 1 tokens, a
  // token id >= vocab (naming the first one's token and byte offsets), or a
  // missing or broken document index with document_attention.
  BatchLoader(const BatchLoaderOptions& options, DataPosition start);
  // Stops and joins the workers; batches not taken are dropped.
  ~BatchLoader();

  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next micro-batch, in order; blocks only when the workers are behind.
  // Rethrows a worker's error (e.g. a token id >= vocab) when its batch is
  // next, and again on every later call.
  TokenBatch Next();

  // Position after the last batch Next() returned (the start position before
  // the first call). Save this at a step boundary to resume exactly.
  DataPosition position() const;

  const TokenFile& file() const { return *file_; }
  // The loss mask read with the file (null: every target is trained).
  const LossMaskFile* mask() const { return mask_.get(); }
  // The document index read with the file (null without document attention).
  const DocumentIndex* documents() const { return documents_.get(); }
  const SampleOrder& order() const { return order_; }
  bool pinned() const { return pin_memory_; }

 private:
  struct Item {
    TokenBatch batch;
    std::exception_ptr error;
  };
  void Work();

  const BatchLoaderOptions options_;
  std::unique_ptr<TokenFile> file_;
  std::unique_ptr<LossMaskFile> mask_;  // TOKENFILE.lossmask, when there is one
  std::unique_ptr<DocumentIndex> documents_;  // TOKENFILE.docs, with document attention
  SampleOrder order_;
  bool pin_memory_;
  const DataPosition start_;

  mutable std::mutex mu_;
  std::condition_variable has_item_;   // workers -> consumer
  std::condition_variable has_space_;  // consumer -> workers, and stop
  // Micro-batch i (counting from start_) reads global samples from
  // start_ + i * world * micro_batch. Workers claim i = next_claim_++ while
  // next_claim_ - next_take_ < prefetch; Next() takes ready_[next_take_].
  std::map<int64_t, Item> ready_;
  int64_t next_claim_ = 0;
  int64_t next_take_ = 0;
  bool stop_ = false;
  bool claims_stopped_ = false;  // a worker failed: nothing after its batch is read
  std::exception_ptr failed_;    // sticky: once a batch failed, Next() always throws
  DataPosition position_;
  std::vector<std::thread> workers_;  // last member: started after everything they read exists
};

}  // namespace llmplan::data
