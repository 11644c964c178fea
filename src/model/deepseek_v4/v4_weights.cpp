#include "model/deepseek_v4/v4_weights.h"

namespace deepinfer::v4 {

namespace {

constexpr std::initializer_list<DType> kNormDTypes = {DType::kBF16, DType::kF32, DType::kF16};
constexpr std::initializer_list<DType> kF32 = {DType::kF32};

class Loader {
 public:
  Loader(const ModelConfig& c, WeightSource& src) : c_(c), src_(src) {
    const bool fp8 = c.quantization.has_value();
    dense_ = fp8 ? ShippedFormat::kFp8 : ShippedFormat::kBf16;
    expert_ = c.expert_dtype == "fp4" ? ShippedFormat::kFp4 : dense_;
  }

  TensorView Norm(const std::string& name, int64_t dim) {
    return src_.Tensor(name, {dim}, kNormDTypes, DummyInit::kNormWeight);
  }

  HcWeights Hc(const std::string& prefix, bool head) {
    const int64_t s = c_.hc_mult, mix = head ? s : (2 + s) * s;
    HcWeights w;
    w.fn = src_.Tensor(prefix + "fn", {mix, s * c_.hidden_size}, kF32, DummyInit::kSmall);
    w.base = src_.Tensor(prefix + "base", {mix}, kF32, DummyInit::kSmall);
    w.scale = src_.Tensor(prefix + "scale", {head ? 1 : 3}, kF32, DummyInit::kSmall);
    return w;
  }

  CompressorWeights Compressor(const std::string& prefix, int64_t ratio, int64_t dim) {
    const int64_t coff = ratio == 4 ? 2 : 1;
    CompressorWeights w;
    w.ratio = ratio;
    w.dim = dim;
    w.ape = src_.Tensor(prefix + "ape", {ratio, coff * dim}, kF32, DummyInit::kSmall);
    w.wkv = src_.Linear(prefix + "wkv", coff * dim, c_.hidden_size, ShippedFormat::kBf16);
    w.wgate = src_.Linear(prefix + "wgate", coff * dim, c_.hidden_size, ShippedFormat::kBf16);
    w.norm = Norm(prefix + "norm.weight", dim);
    return w;
  }

  AttentionWeights Attention(const std::string& p, int64_t ratio) {
    const int64_t d = c_.hidden_size, h = c_.num_attention_heads, hd = c_.head_dim;
    AttentionWeights w;
    w.attn_sink = src_.Tensor(p + "attn_sink", {h}, kF32, DummyInit::kSmall);
    w.wq_a = src_.Linear(p + "wq_a", c_.q_lora_rank, d, dense_);
    w.q_norm = Norm(p + "q_norm.weight", c_.q_lora_rank);
    w.wq_b = src_.Linear(p + "wq_b", h * hd, c_.q_lora_rank, dense_);
    w.wkv = src_.Linear(p + "wkv", hd, d, dense_);
    w.kv_norm = Norm(p + "kv_norm.weight", hd);
    w.wo_a = src_.Linear(p + "wo_a", c_.o_groups * c_.o_lora_rank, h * hd / c_.o_groups, dense_);
    w.wo_b = src_.Linear(p + "wo_b", d, c_.o_groups * c_.o_lora_rank, dense_);
    if (ratio != 0) w.compressor = Compressor(p + "compressor.", ratio, hd);
    if (ratio == 4) {
      IndexerWeights iw;
      iw.wq_b = src_.Linear(p + "indexer.wq_b", c_.index_n_heads * c_.index_head_dim,
                            c_.q_lora_rank, dense_);
      iw.weights_proj = src_.Linear(p + "indexer.weights_proj", c_.index_n_heads, d,
                                    ShippedFormat::kBf16);
      iw.compressor = Compressor(p + "indexer.compressor.", 4, c_.index_head_dim);
      w.indexer = iw;
    }
    return w;
  }

  ExpertWeights Expert(const std::string& p, ShippedFormat format) {
    const int64_t d = c_.hidden_size, inter = c_.moe_intermediate_size;
    ExpertWeights e;
    e.w1 = src_.Linear(p + "w1", inter, d, format);
    e.w2 = src_.Linear(p + "w2", d, inter, format);
    e.w3 = src_.Linear(p + "w3", inter, d, format);
    return e;
  }

  MoeWeights Moe(const std::string& p, bool hash) {
    MoeWeights w;
    w.gate = src_.Linear(p + "gate", c_.n_routed_experts, c_.hidden_size, ShippedFormat::kBf16);
    if (hash) {
      w.tid2eid = src_.Tensor(p + "gate.tid2eid", {c_.vocab_size, c_.num_experts_per_tok},
                              {DType::kI64}, DummyInit::kExpertIds);
    } else {
      w.gate_bias = src_.Tensor(p + "gate.bias", {c_.n_routed_experts}, kF32, DummyInit::kSmall);
    }
    for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
      w.experts.push_back(Expert(p + "experts." + std::to_string(e) + ".", expert_));
    }
    w.shared = Expert(p + "shared_experts.", dense_);
    return w;
  }

  BlockWeights Block(const std::string& p, int64_t layer, int64_t ratio, bool hash) {
    BlockWeights w;
    w.layer = layer;
    w.compress_ratio = ratio;
    w.hash_routed = hash;
    w.attn_norm = Norm(p + "attn_norm.weight", c_.hidden_size);
    w.ffn_norm = Norm(p + "ffn_norm.weight", c_.hidden_size);
    w.hc_attn = Hc(p + "hc_attn_", false);
    w.hc_ffn = Hc(p + "hc_ffn_", false);
    w.attn = Attention(p + "attn.", ratio);
    w.ffn = Moe(p + "ffn.", hash);
    return w;
  }

  ModelWeights All() {
    const int64_t d = c_.hidden_size;
    ModelWeights w;
    w.embed = src_.Tensor("embed.weight", {c_.vocab_size, d}, kNormDTypes, DummyInit::kSmall);
    w.head = src_.Linear("head", c_.vocab_size, d, ShippedFormat::kBf16);
    w.norm = Norm("norm.weight", d);
    w.hc_head = Hc("hc_head_", true);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      w.layers.push_back(Block("layers." + std::to_string(l) + ".", l, c_.compress_ratio(l),
                               c_.is_hash_layer(l)));
    }
    for (int64_t i = 0; i < c_.num_nextn_predict_layers; ++i) {
      const std::string p = "mtp." + std::to_string(i) + ".";
      MtpWeights m;
      m.block = Block(p, c_.num_hidden_layers + i, 0, false);
      m.e_proj = src_.Linear(p + "e_proj", d, d, dense_);
      m.h_proj = src_.Linear(p + "h_proj", d, d, dense_);
      m.enorm = Norm(p + "enorm.weight", d);
      m.hnorm = Norm(p + "hnorm.weight", d);
      m.norm = Norm(p + "norm.weight", d);
      m.hc_head = Hc(p + "hc_head_", true);
      w.mtp.push_back(std::move(m));
    }
    return w;
  }

 private:
  const ModelConfig& c_;
  WeightSource& src_;
  ShippedFormat dense_;
  ShippedFormat expert_;
};

}  // namespace

ModelWeights LoadWeights(const ModelConfig& config, WeightSource& source) {
  return Loader(config, source).All();
}

std::vector<std::string> UnusedTensors(const Checkpoint& checkpoint, const WeightSource& source) {
  std::vector<std::string> unused;
  for (const std::string& name : checkpoint.Names()) {
    if (!source.requested().count(name)) unused.push_back(name);
  }
  return unused;
}

namespace {

void VisitLinear(LinearWeight& w, const std::function<void(TensorView&)>& fn) {
  fn(w.data);
  fn(w.scale);
}

void VisitHc(HcWeights& w, const std::function<void(TensorView&)>& fn) {
  fn(w.fn);
  fn(w.base);
  fn(w.scale);
}

void VisitCompressor(CompressorWeights& w, const std::function<void(TensorView&)>& fn) {
  fn(w.ape);
  VisitLinear(w.wkv, fn);
  VisitLinear(w.wgate, fn);
  fn(w.norm);
}

void VisitExpert(ExpertWeights& w, const std::function<void(TensorView&)>& fn) {
  VisitLinear(w.w1, fn);
  VisitLinear(w.w2, fn);
  VisitLinear(w.w3, fn);
}

void VisitBlock(BlockWeights& b, const std::function<void(TensorView&)>& fn) {
  fn(b.attn_norm);
  fn(b.ffn_norm);
  VisitHc(b.hc_attn, fn);
  VisitHc(b.hc_ffn, fn);
  AttentionWeights& a = b.attn;
  fn(a.attn_sink);
  for (LinearWeight* w : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b}) VisitLinear(*w, fn);
  fn(a.q_norm);
  fn(a.kv_norm);
  if (a.compressor) VisitCompressor(*a.compressor, fn);
  if (a.indexer) {
    VisitLinear(a.indexer->wq_b, fn);
    VisitLinear(a.indexer->weights_proj, fn);
    VisitCompressor(a.indexer->compressor, fn);
  }
  MoeWeights& m = b.ffn;
  VisitLinear(m.gate, fn);
  fn(m.gate_bias);
  fn(m.tid2eid);
  for (ExpertWeights& e : m.experts) VisitExpert(e, fn);
  VisitExpert(m.shared, fn);
}

}  // namespace

void ForEachTensor(ModelWeights& weights, const std::function<void(TensorView&)>& fn) {
  fn(weights.embed);
  VisitLinear(weights.head, fn);
  fn(weights.norm);
  VisitHc(weights.hc_head, fn);
  for (BlockWeights& b : weights.layers) VisitBlock(b, fn);
  for (MtpWeights& m : weights.mtp) {
    VisitBlock(m.block, fn);
    VisitLinear(m.e_proj, fn);
    VisitLinear(m.h_proj, fn);
    fn(m.enorm);
    fn(m.hnorm);
    fn(m.norm);
    VisitHc(m.hc_head, fn);
  }
}

}  // namespace deepinfer::v4
