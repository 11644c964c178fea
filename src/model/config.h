// ModelConfig: the parts of a Hugging Face config.json the engine uses, for the DeepSeek-V4
// family, in the shipped key names (dsv4-model.md §1). Parsing validates every key it reads and
// names the file and key in its errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct RopeScaling {
  std::string type;  // "yarn" or "" (none)
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

struct QuantizationConfig {
  std::string quant_method;  // "fp8"
  std::string fmt;           // "e4m3"
  std::string scale_fmt;     // "ue8m0"
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

enum class ScoringFunc { kSqrtSoftplus, kSigmoid, kSoftmax };

struct ModelConfig {
  std::string source;        // where it was read from (for messages)
  std::string architecture;  // architectures[0], e.g. "DeepseekV4ForCausalLM"
  std::string model_type;    // "deepseek_v4"

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 1;
  int64_t head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;

  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;

  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hash_layers = 0;
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double swiglu_limit = 0.0;

  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double compress_rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;

  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = 0;
  bool tie_word_embeddings = false;
  int64_t num_nextn_predict_layers = 0;
  // One entry per trunk layer, then one per MTP layer: 0 = sliding window only, 4 = CSA,
  // 128 = HCA.
  std::vector<int64_t> compress_ratios;

  std::optional<QuantizationConfig> quantization;
  std::string expert_dtype;  // "fp4" or "" (experts in the checkpoint's general format)

  int64_t compress_ratio(int64_t layer) const { return compress_ratios.at(layer); }
  int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
  bool is_hash_layer(int64_t layer) const { return layer < num_hash_layers; }
};

// Parses config.json at `path`. Throws deepinfer::Error naming the file and the key on any
// missing key, wrong type or inconsistent value.
ModelConfig LoadModelConfig(const std::string& path);
ModelConfig ParseModelConfig(const std::string& json_text, const std::string& source);

}  // namespace deepinfer
