#include "executor/checkpoint/pretrained_weights.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <ATen/ATen.h>

#include "executor/checkpoint/sharded_checkpoint.h"
#include "base/atomic_file.h"
#include "planner/plan.h"
#include "base/user_error.h"

namespace llmplan::executor {

namespace fs = std::filesystem;

namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The config.json transformers writes for these architectures.
nlohmann::json HfConfig(const ModelSpec& m, at::ScalarType dtype) {
  const char* model_type = m.architecture == Architecture::kQwen2 ? "qwen2" : m.architecture == Architecture::kMistral ? "mistral" : "llama";
  nlohmann::json c = {{"architectures", {ArchitectureName(m.architecture)}},
                      {"model_type", model_type},
                      {"hidden_size", m.hidden},
                      {"intermediate_size", m.intermediate},
                      {"num_attention_heads", m.heads},
                      {"num_key_value_heads", m.kv_heads},
                      {"head_dim", m.head_dim},
                      {"num_hidden_layers", m.layers},
                      {"vocab_size", m.vocab},
                      {"tie_word_embeddings", m.tied_embeddings},
                      {"rope_theta", m.rope_theta},
                      {"rms_norm_eps", m.rms_norm_eps},
                      {"max_position_embeddings", m.max_seq},
                      {"hidden_act", "silu"},
                      {"initializer_range", 0.02},
                      {"torch_dtype", dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32"}};
  if (m.architecture == Architecture::kLlama) {
    c["attention_bias"] = m.qkv_bias;
    c["mlp_bias"] = false;
  }
  return c;
}

}  // namespace

PretrainedWeights::PretrainedWeights(const std::string& path, const LlamaModel& model, bool partial) : model_(model) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      file_of_ = checkpoint::ReadSafetensorsIndex((dir / "model.safetensors.index.json").string());
    } else if (fs::exists(dir / "model.safetensors", ec)) {
      const std::string file = (dir / "model.safetensors").string();
      for (const auto& [name, entry] : FileOf(file).entries()) file_of_[name] = file;
    } else {
      throw UserError("--init-from " + path + " has neither model.safetensors nor model.safetensors.index.json");
    }
  } else if (fs::is_regular_file(path, ec)) {
    for (const auto& [name, entry] : FileOf(path).entries()) file_of_[name] = path;
  } else {
    throw UserError("--init-from " + path + " does not exist: pass a Hugging Face model directory or .safetensors file");
  }
  for (int u = 0; u < model.num_units(); ++u) {
    for (const ParamShape& p : model.unit_params(u)) {
      if (file_of_.count(p.name) == 0)
        throw UserError("--init-from " + path + " has no tensor " + p.name + ": the weights are of another model");
      const checkpoint::SafetensorsReader& r = FileOf(p.name);
      const checkpoint::SafetensorsEntry& e = r.entries().at(p.name);
      if (e.shape != p.shape)
        throw UserError("--init-from " + path + ": " + p.name + " is " + ShapeText(e.shape) + ", this model's is " +
                        ShapeText(p.shape) + ": the weights are of another model");
      if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16" && e.dtype != "F64")
        throw UserError("--init-from " + path + ": " + p.name + " is " + e.dtype + ", not a float dtype");
    }
  }
  // What the model does not use: extra layers, another architecture's
  // tensors. Not counted: a tied model's copy of the embedding as the head,
  // and rotary tables, which older Llama exports carry as buffers.
  std::set<std::string> used;
  for (int u = 0; u < model.num_units(); ++u)
    for (const ParamShape& p : model.unit_params(u)) used.insert(p.name);
  for (const auto& [name, file] : file_of_) {
    const bool rotary = name.size() >= 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0;
    if (used.count(name) == 0 && name != "lm_head.weight" && !rotary) left_out_.push_back(name);
  }
  if (!left_out_.empty() && !partial) {
    std::string names;
    for (size_t i = 0; i < left_out_.size() && i < 3; ++i) names += (i ? ", " : "") + left_out_[i];
    if (left_out_.size() > 3) names += ", ...";
    throw UserError("--init-from " + path + " holds " + std::to_string(left_out_.size()) +
                    " tensor(s) this model does not use (" + names +
                    "): the weights are of another model; plan for that model, or pass --init-partial to load the "
                    "tensors that match and leave these out");
  }
}

const checkpoint::SafetensorsReader& PretrainedWeights::FileOf(const std::string& tensor) {
  const std::string file = file_of_.count(tensor) ? file_of_.at(tensor) : tensor;  // a path itself when opening
  auto it = readers_.find(file);
  if (it == readers_.end()) it = readers_.emplace(file, std::make_unique<checkpoint::SafetensorsReader>(file)).first;
  return *it->second;
}

at::Tensor PretrainedWeights::UnitRange(int unit, int64_t begin, int64_t count) {
  at::Tensor out = at::empty({count}, at::kFloat);
  int64_t offset = 0;
  for (const ParamShape& p : model_.unit_params(unit)) {
    const int64_t lo = std::max(begin, offset), hi = std::min(begin + count, offset + p.numel());
    if (lo < hi) out.narrow(0, lo - begin, hi - lo).copy_(FileOf(p.name).Read(p.name).reshape({-1}).narrow(0, lo - offset, hi - lo));
    offset += p.numel();
  }
  return out;
}

int64_t ExportCheckpoint(const std::string& checkpoint_dir, const std::string& out_dir, const ExportOptions& options) {
  const Plan plan = LoadPlan((fs::path(checkpoint_dir) / "plan.json").string());
  LlamaModel model(plan.model);
  CheckpointReader reader(checkpoint_dir, model);
  checkpoint::VerifyCheckpointFiles(checkpoint_dir, reader.manifest());
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw UserError("cannot create " + out_dir + ": " + ec.message());

  // Files of at most max_file_bytes, parameters in model order (HF's layout).
  struct Param {
    int unit;
    int64_t offset;
    ParamShape shape;
  };
  std::vector<std::vector<Param>> files(1);
  int64_t file_bytes = 0, total_bytes = 0;
  const int64_t element_bytes = static_cast<int64_t>(c10::elementSize(options.dtype));
  for (int u = 0; u < model.num_units(); ++u) {
    int64_t offset = 0;
    for (const ParamShape& p : model.unit_params(u)) {
      const int64_t bytes = p.numel() * element_bytes;
      if (file_bytes > 0 && file_bytes + bytes > options.max_file_bytes) {
        files.emplace_back();
        file_bytes = 0;
      }
      files.back().push_back({u, offset, p});
      file_bytes += bytes;
      total_bytes += bytes;
      offset += p.numel();
    }
  }
  const bool sharded = files.size() > 1;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t f = 0; f < files.size(); ++f) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
    const std::string file = sharded ? name : "model.safetensors";
    std::map<std::string, at::Tensor> tensors;
    for (const Param& p : files[f]) {
      tensors[p.shape.name] = reader.Read(p.unit, "master", p.offset, p.shape.numel()).view(p.shape.shape).to(options.dtype);
      weight_map[p.shape.name] = file;
    }
    checkpoint::WriteSafetensors((fs::path(out_dir) / file).string(), tensors, {{"format", "pt"}}, "exported weights");
  }
  if (sharded) {
    WriteFileAtomically((fs::path(out_dir) / "model.safetensors.index.json").string(),
                        nlohmann::json{{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}}.dump(2) + "\n",
                        "safetensors index");
  } else {
    std::remove((fs::path(out_dir) / "model.safetensors.index.json").c_str());
  }
  WriteFileAtomically((fs::path(out_dir) / "config.json").string(), HfConfig(plan.model, options.dtype).dump(2) + "\n",
                      "model config");
  return total_bytes;
}

}  // namespace llmplan::executor
