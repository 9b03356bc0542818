// ModelSpec: the shape of a Llama-family decoder (Llama, Mistral, Qwen2), which
// is all the planner, the simulator and the executor need to know about a model.
// It comes from a built-in preset or a Hugging Face config.json.
//
// Parameter counts are exact: they equal the number of elements the executor's
// LibTorch model allocates and the tensors a Hugging Face checkpoint holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmplan {

enum class Architecture { kLlama, kMistral, kQwen2 };

struct ModelSpec {
  std::string name;
  Architecture architecture = Architecture::kLlama;
  int64_t hidden = 0;        // hidden_size
  int64_t intermediate = 0;  // intermediate_size (SwiGLU width)
  int64_t heads = 0;         // num_attention_heads
  int64_t kv_heads = 0;      // num_key_value_heads (GQA); equals heads when absent
  int64_t head_dim = 0;      // head_dim; hidden / heads when absent
  int64_t layers = 0;        // num_hidden_layers
  int64_t vocab = 0;         // vocab_size
  bool tied_embeddings = false;  // tie_word_embeddings: lm_head shares embed_tokens
  bool qkv_bias = false;         // Qwen2: biases on q/k/v projections
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int64_t max_seq = 4096;  // max_position_embeddings

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }

  // Parameters of one transformer block (attention, MLP, two RMSNorms).
  int64_t ParamsPerBlock() const;
  // embed_tokens: vocab x hidden.
  int64_t EmbeddingParams() const { return vocab * hidden; }
  // lm_head: vocab x hidden, or 0 when tied to the embedding.
  int64_t HeadParams() const { return tied_embeddings ? 0 : vocab * hidden; }
  // The final RMSNorm.
  int64_t FinalNormParams() const { return hidden; }
  int64_t TotalParams() const;
  // N in the PaLM MFU formula: all parameters except the input embedding
  // (which is a lookup, not a matmul) unless it is tied to the output head.
  int64_t NonEmbeddingParams() const;
  // Model FLOPs per token (PaLM appendix B): 6*N + 12*L*H*Q*T. Attention is
  // counted in full (no causal halving) and recompute is excluded.
  double ModelFlopsPerToken(int64_t seq_len) const;

  // REQUIRES: nothing. Throws UserError naming the first field that is
  // missing, non-positive or inconsistent (heads not divisible by kv_heads...).
  void Validate() const;
};

std::string ArchitectureName(Architecture a);  // HF class name, e.g. "LlamaForCausalLM"

// Names of the built-in presets (llama3-8b, qwen2.5-7b, tiny-* for CPU tests...).
std::vector<std::string> PresetModelNames();

// Throws UserError if `name` is not a preset.
ModelSpec PresetModel(const std::string& name);

// Parses a Hugging Face config.json object. Throws UserError for an
// unsupported architecture or a missing/invalid field, naming it.
ModelSpec ModelSpecFromHfConfig(const nlohmann::json& config, const std::string& name);

// `name_or_path` is a preset name, or a path to a config.json (or a directory
// holding one). Throws UserError when it is neither.
ModelSpec LoadModelSpec(const std::string& name_or_path);

// The spec as a JSON object with HF field names (round-trips through
// ModelSpecFromHfConfig, so a plan file carries its model with it).
nlohmann::json ModelSpecToJson(const ModelSpec& spec);

}  // namespace llmplan
