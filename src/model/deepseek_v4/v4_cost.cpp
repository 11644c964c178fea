// V4Model::EstimateStepCost: bytes and FLOPs of one step, from the loaded weights' sizes and the
// state layout (dsv4-model.md §3–§6). Counts follow what the forward reads, not what an ideal
// kernel could skip: every dense weight once per step, the routed experts the step's tokens
// pick, the window ring, every compressor state, every index row a CSA query scores, the main
// rows it selects, and every row an HCA query attends.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::v4 {

namespace {

// An absent tensor (an empty view: no gate bias in hash layers, no scale on dense weights) reads
// nothing.
double Bytes(const TensorView& t) { return t.empty() ? 0.0 : static_cast<double>(t.nbytes()); }
double Bytes(const LinearWeight& w) { return Bytes(w.data) + Bytes(w.scale); }
// FLOPs of one row through a linear layer.
double RowFlops(const LinearWeight& w) { return 2.0 * static_cast<double>(w.out_features * w.in_features); }

double Bytes(const HcWeights& w) { return Bytes(w.fn) + Bytes(w.base) + Bytes(w.scale); }
double RowFlops(const HcWeights& w) { return w.fn.ndim() == 2 ? 2.0 * static_cast<double>(w.fn.numel()) : 0.0; }

double Bytes(const CompressorWeights& w) { return Bytes(w.ape) + Bytes(w.wkv) + Bytes(w.wgate) + Bytes(w.norm); }
double RowFlops(const CompressorWeights& w) { return RowFlops(w.wkv) + RowFlops(w.wgate); }

double Bytes(const ExpertWeights& w) { return Bytes(w.w1) + Bytes(w.w2) + Bytes(w.w3); }
double RowFlops(const ExpertWeights& w) { return RowFlops(w.w1) + RowFlops(w.w2) + RowFlops(w.w3); }

// Weights every token of a block passes through (all but the routed experts and tid2eid).
double DenseBytes(const BlockWeights& w) {
  const AttentionWeights& a = w.attn;
  double b = Bytes(w.attn_norm) + Bytes(w.ffn_norm) + Bytes(w.hc_attn) + Bytes(w.hc_ffn);
  b += Bytes(a.attn_sink) + Bytes(a.wq_a) + Bytes(a.q_norm) + Bytes(a.wq_b) + Bytes(a.wkv) + Bytes(a.kv_norm) +
       Bytes(a.wo_a) + Bytes(a.wo_b);
  if (a.compressor) b += Bytes(*a.compressor);
  if (a.indexer) b += Bytes(a.indexer->wq_b) + Bytes(a.indexer->weights_proj) + Bytes(a.indexer->compressor);
  b += Bytes(w.ffn.gate) + Bytes(w.ffn.gate_bias) + Bytes(w.ffn.shared);
  return b;
}

// Linear FLOPs of one token through a block, its top-k routed experts included.
double TokenLinearFlops(const BlockWeights& w, int64_t top_k) {
  const AttentionWeights& a = w.attn;
  double f = RowFlops(w.hc_attn) + RowFlops(w.hc_ffn);
  f += RowFlops(a.wq_a) + RowFlops(a.wq_b) + RowFlops(a.wkv) + RowFlops(a.wo_a) + RowFlops(a.wo_b);
  if (a.compressor) f += RowFlops(*a.compressor);
  if (a.indexer) f += RowFlops(a.indexer->wq_b) + RowFlops(a.indexer->weights_proj) + RowFlops(a.indexer->compressor);
  f += RowFlops(w.ffn.gate) + RowFlops(w.ffn.shared);
  if (!w.ffn.experts.empty()) f += static_cast<double>(top_k) * RowFlops(w.ffn.experts.front());
  return f;
}

}  // namespace

StepCost V4Model::EstimateStepCost(const StepCostQuery& q) const {
  DI_CHECK(q.num_seqs >= 0 && q.tokens_per_seq >= 1 && q.context >= 0, "step cost of {} sequences x {} tokens at {}",
           q.num_seqs, q.tokens_per_seq, q.context);
  const ModelConfig& c = config_;
  const double seqs = static_cast<double>(q.num_seqs);
  const double tokens = seqs * static_cast<double>(q.tokens_per_seq);
  const int64_t top_k = c.num_experts_per_tok;
  const double experts = static_cast<double>(c.n_routed_experts);
  const double f32 = sizeof(float);
  // An attention row as the state stores it (v4_state.h): f32, or packed (BF16: 1,024 bytes for V4's
  // rows; FP8: 592).
  const cpu::PackedRowFormat rows = StateRowFormat();
  const double head_row =
      rows.dim > 0 ? static_cast<double>(rows.row_pitch()) : static_cast<double>(c.head_dim) * f32;
  const double index_row = static_cast<double>(c.index_head_dim) * f32;
  StepCost cost;
  // Distinct experts among `tokens`·top_k uniform picks (each token picks top_k distinct ones).
  cost.expected_experts_per_layer =
      experts * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / experts, tokens));

  cost.weight_bytes += std::min(tokens, static_cast<double>(c.vocab_size)) * Bytes(weights_.embed) /
                       static_cast<double>(c.vocab_size);
  cost.weight_bytes += Bytes(weights_.head) + Bytes(weights_.norm) + Bytes(weights_.hc_head);
  cost.linear_flops += seqs * (RowFlops(weights_.head) + RowFlops(weights_.hc_head));

  for (const BlockWeights& w : weights_.layers) {
    LayerCost layer;
    layer.layer = w.layer;
    layer.compress_ratio = w.compress_ratio;
    layer.weight_bytes += DenseBytes(w);
    if (!w.ffn.tid2eid.empty()) {
      layer.weight_bytes += tokens * static_cast<double>(top_k * DTypeSize(w.ffn.tid2eid.dtype()));
    }
    if (!w.ffn.experts.empty()) {
      const double routed = cost.expected_experts_per_layer * Bytes(w.ffn.experts.front());
      layer.weight_bytes += routed;
      cost.routed_expert_bytes += routed;
    }
    layer.linear_flops = tokens * TokenLinearFlops(w, top_k);

    // State of one sequence, then times the sequences.
    const int64_t ratio = w.compress_ratio;
    const int64_t end = q.context + q.tokens_per_seq;  // positions after the step
    double read = 0, write = 0, attention = 0;
    // Window ring: the rows before the step still in the window; the step's last `window` rows
    // are written back.
    read += static_cast<double>(std::min(q.context, c.sliding_window)) * head_row;
    write += static_cast<double>(std::min(q.tokens_per_seq, c.sliding_window)) * head_row;
    if (ratio > 0) {
      const int64_t coff = ratio == 4 ? 2 : 1;
      const double compressor_state = 2.0 * static_cast<double>(coff * ratio * coff * c.head_dim) * f32;
      read += compressor_state;
      write += compressor_state;
      write += static_cast<double>(end / ratio - q.context / ratio) * head_row;
      if (w.attn.indexer) {
        const double indexer_state = 2.0 * static_cast<double>(8 * 2 * c.index_head_dim) * f32;
        read += indexer_state;
        write += indexer_state;
        write += static_cast<double>(end / ratio - q.context / ratio) * index_row;
      }
    }
    // Per query token at position p: window rows, then compressed rows (HCA: all visible;
    // CSA: the top-k the indexer picks after scoring every visible index row).
    const int64_t heads = c.num_attention_heads;
    for (int64_t p = q.context; p < end; ++p) {
      const int64_t window_rows = std::min(p + 1, c.sliding_window);
      int64_t attended = window_rows;
      if (ratio > 0) {
        const int64_t visible = (p + 1) / ratio;
        if (w.attn.indexer) {
          const int64_t selected = std::min(visible, c.index_topk);
          attended += selected;
          attention += 2.0 * static_cast<double>(c.index_n_heads * visible * c.index_head_dim);
          read += static_cast<double>(selected) * head_row;
        } else {
          attended += visible;
        }
      }
      attention += 4.0 * static_cast<double>(heads * attended * c.head_dim);  // QK and PV
    }
    if (ratio > 0) {
      // Compressed rows the step scans once per sequence (the CSA index rows, the HCA rows).
      const double visible = static_cast<double>(end / ratio);
      read += visible * (w.attn.indexer ? index_row : head_row);
    }
    layer.state_read_bytes = seqs * read;
    layer.attention_flops = seqs * attention;
    cost.weight_bytes += layer.weight_bytes;
    cost.state_read_bytes += layer.state_read_bytes;
    cost.state_write_bytes += seqs * write;
    cost.linear_flops += layer.linear_flops;
    cost.attention_flops += layer.attention_flops;
    cost.layers.push_back(layer);
  }
  return cost;
}

}  // namespace deepinfer::v4
