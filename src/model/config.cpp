#include "model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"

namespace deepinfer {

namespace {

using Json = nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const Json& root, const std::string& source) : root_(root), source_(source) {}

  const Json& Required(const char* key) const {
    auto it = root_.find(key);
    if (it == root_.end() || it->is_null()) DI_THROW("{}: missing key '{}'", source_, key);
    return *it;
  }

  int64_t Int(const char* key) const {
    const Json& v = Required(key);
    if (!v.is_number_integer()) DI_THROW("{}: key '{}' must be an integer, got {}", source_, key, v.dump());
    return v.get<int64_t>();
  }
  int64_t Int(const char* key, int64_t fallback) const { return Has(key) ? Int(key) : fallback; }

  double Number(const char* key) const {
    const Json& v = Required(key);
    if (!v.is_number()) DI_THROW("{}: key '{}' must be a number, got {}", source_, key, v.dump());
    return v.get<double>();
  }
  double Number(const char* key, double fallback) const { return Has(key) ? Number(key) : fallback; }

  std::string String(const char* key) const {
    const Json& v = Required(key);
    if (!v.is_string()) DI_THROW("{}: key '{}' must be a string, got {}", source_, key, v.dump());
    return v.get<std::string>();
  }
  std::string String(const char* key, const std::string& fallback) const {
    return Has(key) ? String(key) : fallback;
  }

  bool Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    const Json& v = Required(key);
    if (!v.is_boolean()) DI_THROW("{}: key '{}' must be a boolean, got {}", source_, key, v.dump());
    return v.get<bool>();
  }

  bool Has(const char* key) const {
    auto it = root_.find(key);
    return it != root_.end() && !it->is_null();
  }

 private:
  const Json& root_;
  const std::string& source_;
};

void Validate(const ModelConfig& c) {
  const std::string& s = c.source;
  auto positive = [&](int64_t v, const char* key) {
    if (v <= 0) DI_THROW("{}: key '{}' must be positive, got {}", s, key, v);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.head_dim, "head_dim");
  positive(c.q_lora_rank, "q_lora_rank");
  positive(c.o_groups, "o_groups");
  positive(c.o_lora_rank, "o_lora_rank");
  positive(c.sliding_window, "sliding_window");
  positive(c.hc_mult, "hc_mult");
  positive(c.hc_sinkhorn_iters, "hc_sinkhorn_iters");
  positive(c.n_routed_experts, "n_routed_experts");
  positive(c.num_experts_per_tok, "num_experts_per_tok");
  positive(c.moe_intermediate_size, "moe_intermediate_size");
  if (c.num_key_value_heads != 1) {
    DI_THROW("{}: num_key_value_heads must be 1 for DeepSeek-V4 (one shared K=V head), got {}", s,
             c.num_key_value_heads);
  }
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim > c.head_dim || c.qk_rope_head_dim % 2) {
    DI_THROW("{}: qk_rope_head_dim {} must be even and in (0, head_dim={}]", s, c.qk_rope_head_dim,
             c.head_dim);
  }
  if (c.num_attention_heads % c.o_groups != 0) {
    DI_THROW("{}: num_attention_heads {} is not a multiple of o_groups {}", s,
             c.num_attention_heads, c.o_groups);
  }
  if (c.n_shared_experts != 1) {
    DI_THROW("{}: n_shared_experts must be 1, got {}", s, c.n_shared_experts);
  }
  if (c.num_experts_per_tok > c.n_routed_experts) {
    DI_THROW("{}: num_experts_per_tok {} exceeds n_routed_experts {}", s, c.num_experts_per_tok,
             c.n_routed_experts);
  }
  const int64_t expected_ratios = c.num_hidden_layers + c.num_nextn_predict_layers;
  if (static_cast<int64_t>(c.compress_ratios.size()) < expected_ratios) {
    DI_THROW("{}: key 'compress_ratios' has {} entries, need num_hidden_layers + "
             "num_nextn_predict_layers = {}",
             s, c.compress_ratios.size(), expected_ratios);
  }
  bool any_csa = false;
  for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
    const int64_t r = c.compress_ratios[i];
    if (r != 0 && r != 4 && r != 128) {
      DI_THROW("{}: compress_ratios[{}] = {}; supported ratios are 0, 4 and 128", s, i, r);
    }
    if (static_cast<int64_t>(i) >= c.num_hidden_layers && r != 0) {
      DI_THROW("{}: compress_ratios[{}] (an MTP layer) must be 0, got {}", s, i, r);
    }
    any_csa |= r == 4;
  }
  if (any_csa) {
    positive(c.index_n_heads, "index_n_heads");
    positive(c.index_head_dim, "index_head_dim");
    positive(c.index_topk, "index_topk");
    if (c.index_head_dim < c.qk_rope_head_dim || (c.index_head_dim & (c.index_head_dim - 1))) {
      DI_THROW("{}: index_head_dim {} must be a power of two (Hadamard) and >= qk_rope_head_dim", s,
               c.index_head_dim);
    }
  }
  if (c.num_hash_layers > c.num_hidden_layers) {
    DI_THROW("{}: num_hash_layers {} exceeds num_hidden_layers {}", s, c.num_hash_layers,
             c.num_hidden_layers);
  }
  if (c.eos_token_ids.empty()) DI_THROW("{}: missing key 'eos_token_id'", s);
}

}  // namespace

ModelConfig ParseModelConfig(const std::string& json_text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(json_text);
  } catch (const Json::parse_error& e) {
    DI_THROW("{}: not valid JSON: {}", source, e.what());
  }
  if (!root.is_object()) DI_THROW("{}: the top level must be a JSON object", source);
  // V4.1 nests the text model under text_config.
  const Json* text_root = &root;
  if (root.contains("text_config") && root["text_config"].is_object()) text_root = &root["text_config"];
  ConfigReader r(*text_root, source);
  ConfigReader top(root, source);

  ModelConfig c;
  c.source = source;
  if (top.Has("architectures")) {
    const Json& a = top.Required("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      DI_THROW("{}: key 'architectures' must be a non-empty list of strings", source);
    }
    c.architecture = a[0].get<std::string>();
  }
  c.model_type = r.String("model_type");
  c.vocab_size = r.Int("vocab_size");
  c.hidden_size = r.Int("hidden_size");
  c.num_hidden_layers = r.Int("num_hidden_layers");
  c.num_attention_heads = r.Int("num_attention_heads");
  c.num_key_value_heads = r.Int("num_key_value_heads", 1);
  c.head_dim = r.Int("head_dim");
  c.qk_rope_head_dim = r.Int("qk_rope_head_dim");
  c.q_lora_rank = r.Int("q_lora_rank");
  c.o_groups = r.Int("o_groups");
  c.o_lora_rank = r.Int("o_lora_rank");
  c.sliding_window = r.Int("sliding_window");
  c.index_n_heads = r.Int("index_n_heads", 0);
  c.index_head_dim = r.Int("index_head_dim", 0);
  c.index_topk = r.Int("index_topk", 0);
  c.hc_mult = r.Int("hc_mult");
  c.hc_sinkhorn_iters = r.Int("hc_sinkhorn_iters");
  c.hc_eps = r.Number("hc_eps");
  c.n_routed_experts = r.Int("n_routed_experts");
  c.n_shared_experts = r.Int("n_shared_experts");
  c.num_experts_per_tok = r.Int("num_experts_per_tok");
  c.moe_intermediate_size = r.Int("moe_intermediate_size");
  c.num_hash_layers = r.Int("num_hash_layers", 0);
  const std::string scoring = r.String("scoring_func");
  if (scoring == "sqrtsoftplus") {
    c.scoring_func = ScoringFunc::kSqrtSoftplus;
  } else if (scoring == "sigmoid") {
    c.scoring_func = ScoringFunc::kSigmoid;
  } else if (scoring == "softmax") {
    c.scoring_func = ScoringFunc::kSoftmax;
  } else {
    DI_THROW("{}: key 'scoring_func' has unsupported value '{}'", source, scoring);
  }
  c.norm_topk_prob = r.Bool("norm_topk_prob", true);
  c.routed_scaling_factor = r.Number("routed_scaling_factor");
  c.swiglu_limit = r.Number("swiglu_limit", 0.0);
  c.rms_norm_eps = r.Number("rms_norm_eps");
  c.rope_theta = r.Number("rope_theta");
  c.compress_rope_theta = r.Number("compress_rope_theta", c.rope_theta);
  if (r.Has("rope_scaling")) {
    const Json& rs = r.Required("rope_scaling");
    if (!rs.is_object()) DI_THROW("{}: key 'rope_scaling' must be an object", source);
    ConfigReader rr(rs, source);
    c.rope_scaling.type = rr.Has("type") ? rr.String("type") : rr.String("rope_type", "");
    c.rope_scaling.factor = rr.Number("factor", 1.0);
    c.rope_scaling.original_max_position_embeddings =
        rr.Int("original_max_position_embeddings", 0);
    c.rope_scaling.beta_fast = rr.Number("beta_fast", 32.0);
    c.rope_scaling.beta_slow = rr.Number("beta_slow", 1.0);
    if (c.rope_scaling.type != "yarn" && !c.rope_scaling.type.empty()) {
      DI_THROW("{}: rope_scaling.type '{}' is not supported (only yarn)", source,
               c.rope_scaling.type);
    }
  }
  c.max_position_embeddings = r.Int("max_position_embeddings");
  c.bos_token_id = static_cast<int32_t>(r.Int("bos_token_id", 0));
  const Json& eos = r.Required("eos_token_id");
  if (eos.is_number_integer()) {
    c.eos_token_ids.push_back(eos.get<int32_t>());
  } else if (eos.is_array()) {
    for (const Json& e : eos) {
      if (!e.is_number_integer()) DI_THROW("{}: key 'eos_token_id' must hold integers", source);
      c.eos_token_ids.push_back(e.get<int32_t>());
    }
  } else {
    DI_THROW("{}: key 'eos_token_id' must be an integer or a list", source);
  }
  c.tie_word_embeddings = r.Bool("tie_word_embeddings", false);
  c.num_nextn_predict_layers = r.Int("num_nextn_predict_layers", 0);
  const Json& ratios = r.Required("compress_ratios");
  if (!ratios.is_array()) DI_THROW("{}: key 'compress_ratios' must be a list", source);
  for (const Json& v : ratios) {
    if (!v.is_number_integer()) DI_THROW("{}: key 'compress_ratios' must hold integers", source);
    c.compress_ratios.push_back(v.get<int64_t>());
  }
  if (top.Has("quantization_config")) {
    const Json& q = top.Required("quantization_config");
    ConfigReader qr(q, source);
    QuantizationConfig qc;
    qc.quant_method = qr.String("quant_method");
    qc.fmt = qr.String("fmt", "e4m3");
    qc.scale_fmt = qr.String("scale_fmt", "");
    if (qr.Has("weight_block_size")) {
      const Json& b = qr.Required("weight_block_size");
      if (!b.is_array() || b.size() != 2) {
        DI_THROW("{}: quantization_config.weight_block_size must be [rows, cols]", source);
      }
      qc.block_rows = b[0].get<int64_t>();
      qc.block_cols = b[1].get<int64_t>();
    }
    if (qc.quant_method != "fp8" || qc.block_rows != 128 || qc.block_cols != 128) {
      DI_THROW("{}: quantization_config {} is not supported (fp8 with 128x128 blocks is)", source,
               q.dump());
    }
    c.quantization = qc;
  }
  c.expert_dtype = r.String("expert_dtype", top.String("expert_dtype", ""));
  Validate(c);
  return c;
}

ModelConfig LoadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) DI_THROW("cannot open model config '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseModelConfig(ss.str(), path);
}

}  // namespace deepinfer
