#include "planner/model_spec.h"

#include <filesystem>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/json_read.h"
#include "base/user_error.h"

namespace llmplan {

int64_t ModelSpec::ParamsPerBlock() const {
  int64_t attention = hidden * q_dim()        // q_proj
                      + 2 * hidden * kv_dim()  // k_proj, v_proj
                      + q_dim() * hidden;      // o_proj
  if (qkv_bias) attention += q_dim() + 2 * kv_dim();
  int64_t mlp = 3 * hidden * intermediate;  // gate, up, down
  int64_t norms = 2 * hidden;               // input_layernorm, post_attention_layernorm
  return attention + mlp + norms;
}

int64_t ModelSpec::TotalParams() const {
  return layers * ParamsPerBlock() + EmbeddingParams() + HeadParams() + FinalNormParams();
}

int64_t ModelSpec::NonEmbeddingParams() const {
  // Tied: the shared matrix does matmul work as the head, so it counts.
  return tied_embeddings ? TotalParams() : TotalParams() - EmbeddingParams();
}

double ModelSpec::ModelFlopsPerToken(int64_t seq_len) const {
  return 6.0 * static_cast<double>(NonEmbeddingParams()) +
         12.0 * static_cast<double>(layers) * static_cast<double>(heads) * static_cast<double>(head_dim) *
             static_cast<double>(seq_len);
}

void ModelSpec::Validate() const {
  auto require_positive = [&](int64_t v, const char* field) {
    if (v <= 0) throw UserError("model " + name + ": " + field + " must be positive (got " + std::to_string(v) + ")");
    // 2^24 per dimension keeps every product below in int64 range.
    if (v > (int64_t{1} << 24))
      throw UserError("model " + name + ": " + field + " = " + std::to_string(v) + " is absurdly large");
  };
  require_positive(hidden, "hidden_size");
  require_positive(intermediate, "intermediate_size");
  require_positive(heads, "num_attention_heads");
  require_positive(kv_heads, "num_key_value_heads");
  require_positive(head_dim, "head_dim");
  require_positive(layers, "num_hidden_layers");
  require_positive(vocab, "vocab_size");
  require_positive(max_seq, "max_position_embeddings");
  if (layers > 4096) throw UserError("model " + name + ": num_hidden_layers above 4096 is not supported");
  if (heads % kv_heads != 0)
    throw UserError("model " + name + ": num_attention_heads (" + std::to_string(heads) +
                    ") must be a multiple of num_key_value_heads (" + std::to_string(kv_heads) + ")");
  // Each dimension below 2^24 is not enough: hidden x (heads x head_dim) can
  // reach 2^72. With heads x head_dim <= 2^24 too (so kv_heads x head_dim is),
  // a block is below 8 x 2^48 parameters and the model below 2^63.
  if (heads * head_dim > (int64_t{1} << 24))
    throw UserError("model " + name + ": num_attention_heads x head_dim = " + std::to_string(heads * head_dim) +
                    " is absurdly large");
  if (head_dim % 2 != 0) throw UserError("model " + name + ": head_dim must be even for rotary embeddings");
  if (!(rope_theta > 0)) throw UserError("model " + name + ": rope_theta must be positive");
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1)) throw UserError("model " + name + ": rms_norm_eps must be in (0, 1)");
}

std::string ArchitectureName(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
  }
  return "LlamaForCausalLM";
}

namespace {

ModelSpec Make(const char* name, Architecture arch, int64_t h, int64_t i, int64_t heads, int64_t kv, int64_t layers,
               int64_t vocab, bool tied, double theta, double eps, int64_t max_seq, int64_t head_dim = 0) {
  ModelSpec s;
  s.name = name;
  s.architecture = arch;
  s.hidden = h;
  s.intermediate = i;
  s.heads = heads;
  s.kv_heads = kv;
  s.head_dim = head_dim ? head_dim : h / heads;
  s.layers = layers;
  s.vocab = vocab;
  s.tied_embeddings = tied;
  s.qkv_bias = arch == Architecture::kQwen2;
  s.rope_theta = theta;
  s.rms_norm_eps = eps;
  s.max_seq = max_seq;
  return s;
}

const std::map<std::string, ModelSpec>& Presets() {
  using A = Architecture;
  static const std::map<std::string, ModelSpec> presets = [] {
    std::map<std::string, ModelSpec> m;
    auto add = [&](ModelSpec s) { m.emplace(s.name, std::move(s)); };
    // Shapes from the models' published config.json files.
    add(Make("llama3-8b", A::kLlama, 4096, 14336, 32, 8, 32, 128256, false, 500000, 1e-5, 8192));
    add(Make("llama3-70b", A::kLlama, 8192, 28672, 64, 8, 80, 128256, false, 500000, 1e-5, 8192));
    add(Make("llama3.1-8b", A::kLlama, 4096, 14336, 32, 8, 32, 128256, false, 500000, 1e-5, 131072));
    add(Make("llama3.1-70b", A::kLlama, 8192, 28672, 64, 8, 80, 128256, false, 500000, 1e-5, 131072));
    add(Make("llama3.1-405b", A::kLlama, 16384, 53248, 128, 8, 126, 128256, false, 500000, 1e-5, 131072));
    add(Make("llama3.2-1b", A::kLlama, 2048, 8192, 32, 8, 16, 128256, true, 500000, 1e-5, 131072, 64));
    add(Make("llama3.2-3b", A::kLlama, 3072, 8192, 24, 8, 28, 128256, true, 500000, 1e-5, 131072, 128));
    add(Make("llama2-7b", A::kLlama, 4096, 11008, 32, 32, 32, 32000, false, 10000, 1e-5, 4096));
    add(Make("llama2-13b", A::kLlama, 5120, 13824, 40, 40, 40, 32000, false, 10000, 1e-5, 4096));
    add(Make("llama2-70b", A::kLlama, 8192, 28672, 64, 8, 80, 32000, false, 10000, 1e-5, 4096));
    add(Make("mistral-7b", A::kMistral, 4096, 14336, 32, 8, 32, 32000, false, 10000, 1e-5, 32768));
    add(Make("qwen2.5-7b", A::kQwen2, 3584, 18944, 28, 4, 28, 152064, false, 1000000, 1e-6, 32768));
    add(Make("qwen2.5-14b", A::kQwen2, 5120, 13824, 40, 8, 48, 152064, false, 1000000, 1e-6, 32768));
    // Llama-3.2-1B's shape with an untied head: the model of the PyTorch FSDP2
    // reference measurements quoted in the README (1.50 B parameters).
    add(Make("llama3.2-1b-untied", A::kLlama, 2048, 8192, 32, 8, 16, 128256, false, 500000, 1e-5, 131072, 64));
    // Tiny models for CPU tests and demos. Vocabulary 512 covers the byte-level
    // tokenizer of `llmplan data prepare` (256 bytes + end-of-text).
    add(Make("tiny-llama", A::kLlama, 64, 176, 4, 2, 4, 512, false, 10000, 1e-5, 1024));
    add(Make("tiny-qwen2", A::kQwen2, 64, 160, 4, 2, 3, 512, true, 10000, 1e-6, 1024));
    add(Make("small-llama", A::kLlama, 256, 704, 8, 4, 6, 512, false, 10000, 1e-5, 2048));
    return m;
  }();
  return presets;
}

Architecture ParseArchitecture(const nlohmann::json& config, const std::string& name) {
  std::string arch;
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string()) {
    arch = config["architectures"][0].get<std::string>();
  } else if (config.contains("model_type") && config["model_type"].is_string()) {
    arch = config["model_type"].get<std::string>();
  } else {
    throw UserError("model " + name + ": config.json has no 'architectures' (or 'model_type') field");
  }
  if (arch == "LlamaForCausalLM" || arch == "llama") return Architecture::kLlama;
  if (arch == "MistralForCausalLM" || arch == "mistral") return Architecture::kMistral;
  if (arch == "Qwen2ForCausalLM" || arch == "qwen2") return Architecture::kQwen2;
  throw UserError("model " + name + ": architecture '" + arch +
                  "' is not supported; use LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM");
}

}  // namespace

std::vector<std::string> PresetModelNames() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : Presets()) names.push_back(name);
  return names;
}

ModelSpec PresetModel(const std::string& name) {
  auto it = Presets().find(name);
  if (it == Presets().end()) {
    std::string known;
    for (const auto& n : PresetModelNames()) known += (known.empty() ? "" : ", ") + n;
    throw UserError("unknown model '" + name + "': give a preset (" + known + ") or a path to a config.json");
  }
  return it->second;
}

ModelSpec ModelSpecFromHfConfig(const nlohmann::json& config, const std::string& name) {
  JsonObject c(config, "model " + name);
  ModelSpec s;
  s.name = name;
  s.architecture = ParseArchitecture(config, name);
  constexpr int64_t kBig = int64_t{1} << 24;
  s.hidden = c.Integer("hidden_size", 1, kBig);
  s.intermediate = c.Integer("intermediate_size", 1, kBig);
  s.heads = c.Integer("num_attention_heads", 1, kBig);
  s.kv_heads = c.Integer("num_key_value_heads", 1, kBig, s.heads);
  s.layers = c.Integer("num_hidden_layers", 1, 4096);
  s.vocab = c.Integer("vocab_size", 1, kBig);
  if (c.Has("head_dim")) {
    s.head_dim = c.Integer("head_dim", 1, kBig);
  } else {
    if (s.hidden % s.heads != 0)
      throw UserError("model " + name + ": hidden_size is not a multiple of num_attention_heads and head_dim is absent");
    s.head_dim = s.hidden / s.heads;
  }
  s.tied_embeddings = c.Bool("tie_word_embeddings", false);
  // Qwen2's q/k/v biases are in its model code, not a config field.
  s.qkv_bias = s.architecture == Architecture::kQwen2;
  if (s.architecture != Architecture::kQwen2 && c.Bool("attention_bias", false))
    throw UserError("model " + name + ": attention_bias=true (biases on q/k/v/o) is not supported for " +
                    ArchitectureName(s.architecture) + "; set it to false");
  if (c.Bool("mlp_bias", false)) throw UserError("model " + name + ": mlp_bias=true is not supported; set it to false");
  s.rope_theta = c.NumberIn("rope_theta", 1e-3, 1e12, 10000.0);
  s.rms_norm_eps = c.NumberIn("rms_norm_eps", 1e-12, 0.5, 1e-5);
  s.max_seq = c.Integer("max_position_embeddings", 1, int64_t{1} << 30, 4096);
  s.Validate();
  return s;
}

ModelSpec LoadModelSpec(const std::string& name_or_path) {
  if (name_or_path.empty()) throw UserError("model name is empty: give a preset name or a path to a config.json");
  if (Presets().count(name_or_path)) return PresetModel(name_or_path);
  std::filesystem::path p(name_or_path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  if (!std::filesystem::exists(p, ec)) return PresetModel(name_or_path);  // throws "unknown model"
  nlohmann::json config = ReadJsonFile(p.string(), "model config");
  std::string name = p.parent_path().filename().string();
  if (name.empty() || name == ".") name = p.stem().string();
  return ModelSpecFromHfConfig(config, name);
}

nlohmann::json ModelSpecToJson(const ModelSpec& s) {
  return nlohmann::json{{"name", s.name},
                        {"architectures", {ArchitectureName(s.architecture)}},
                        {"hidden_size", s.hidden},
                        {"intermediate_size", s.intermediate},
                        {"num_attention_heads", s.heads},
                        {"num_key_value_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"num_hidden_layers", s.layers},
                        {"vocab_size", s.vocab},
                        {"tie_word_embeddings", s.tied_embeddings},
                        {"attention_bias", s.qkv_bias},
                        {"rope_theta", s.rope_theta},
                        {"rms_norm_eps", s.rms_norm_eps},
                        {"max_position_embeddings", s.max_seq},
                        {"params", s.TotalParams()}};
}

}  // namespace llmplan
