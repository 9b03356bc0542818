// Hugging Face weights in and out of llmplan.
//
// PretrainedWeights (`llmplan run --init-from HF_DIR`): a directory holding
// model.safetensors, or model.safetensors.index.json with its shards (how HF
// publishes models over ~5 GB), or one .safetensors file. Every parameter of
// the model must be there under its HF name and shape (any float dtype; read
// as fp32). A tensor of the file the model does not use is an error (a
// 6-layer file would otherwise train as the plan's 4 layers), unless the load
// is partial, which lists what it left out; a tied model's lm_head.weight and
// rotary buffers (rotary_emb.inv_freq) are never counted. A rank reads each
// unit once and keeps only its shard's range.
//
// ExportCheckpoint (`llmplan export --ckpt CKPT --out HF_DIR`): a checkpoint's
// master weights as an HF model directory: config.json (the architecture's
// fields, as transformers writes them) and model.safetensors, or
// model-0000k-of-0000n.safetensors files of at most 5 GB with
// model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/checkpoint/safetensors.h"
#include "executor/model/llama_model.h"

namespace llmplan::executor {

class PretrainedWeights {
 public:
  // Opens `path` and checks that every parameter of `model` is present with
  // its shape. Throws UserError naming the first missing or mis-shaped tensor,
  // or, unless `partial`, the tensors of the file the model does not use.
  PretrainedWeights(const std::string& path, const LlamaModel& model, bool partial = false);

  // The file's tensors the model does not use (sorted), left out of a partial load.
  const std::vector<std::string>& left_out() const { return left_out_; }

  // Elements [begin, begin + count) of unit `unit`'s flat vector (its
  // parameters in order), fp32 on the host.
  at::Tensor UnitRange(int unit, int64_t begin, int64_t count);

 private:
  const checkpoint::SafetensorsReader& FileOf(const std::string& tensor);

  const LlamaModel& model_;
  std::map<std::string, std::string> file_of_;  // tensor name -> file path
  std::map<std::string, std::unique_ptr<checkpoint::SafetensorsReader>> readers_;
  std::vector<std::string> left_out_;
};

struct ExportOptions {
  at::ScalarType dtype = at::kBFloat16;  // of the written tensors
  int64_t max_file_bytes = int64_t{5} << 30;  // HF's default shard size
};

// Writes the checkpoint at `checkpoint_dir` as an HF model directory
// `out_dir` (created; files of an earlier export replaced). Returns the
// number of bytes of weights written. Throws UserError for a damaged
// checkpoint (checksums are verified first) or an unwritable directory.
int64_t ExportCheckpoint(const std::string& checkpoint_dir, const std::string& out_dir, const ExportOptions& options);

}  // namespace llmplan::executor
