// DeepSeek-V4 weights as views, in the official checkpoint naming (dsv4-model.md §2).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/hc.h"
#include "model/config.h"
#include "model/weight_source.h"
#include "tensor/linear_weight.h"

namespace deepinfer::v4 {

struct HcWeights {
  TensorView fn;     // [(2+S)·S, S·D] (or [S, S·D] for a head) F32
  TensorView base;   // F32
  TensorView scale;  // [3] (or [1]) F32
};

struct CompressorWeights {
  int64_t ratio = 0;
  int64_t dim = 0;              // output row width
  TensorView ape;               // [ratio, coff·dim] F32
  LinearWeight wkv, wgate;      // [coff·dim, D]
  TensorView norm;              // [dim]
};

struct IndexerWeights {
  LinearWeight wq_b;            // [index_heads·index_dim, q_lora]
  LinearWeight weights_proj;    // [index_heads, D]
  CompressorWeights compressor; // width index_dim
};

struct AttentionWeights {
  TensorView attn_sink;         // [H] F32
  LinearWeight wq_a;            // [q_lora, D]
  TensorView q_norm;            // [q_lora]
  LinearWeight wq_b;            // [H·head_dim, q_lora]
  LinearWeight wkv;             // [head_dim, D]
  TensorView kv_norm;           // [head_dim]
  LinearWeight wo_a;            // [o_groups·o_lora, H·head_dim/o_groups]
  LinearWeight wo_b;            // [D, o_groups·o_lora]
  std::optional<CompressorWeights> compressor;  // CSA and HCA layers
  std::optional<IndexerWeights> indexer;        // CSA layers
};

struct ExpertWeights {
  LinearWeight w1, w2, w3;  // w1/w3 [inter, D], w2 [D, inter]
  // w1's rows then w3's as one [2·inter, D] weight over the same memory, where the CUDA upload put
  // them side by side (V4Model::UploadWeights, DEEPINFER_JOIN_W13); empty otherwise. Not visited by
  // ForEachTensor: w1 and w3 are views of it.
  LinearWeight w13;
};

struct MoeWeights {
  LinearWeight gate;        // [E, D], product taken in fp32
  TensorView gate_bias;     // [E] F32, score-routed layers only
  TensorView tid2eid;       // [vocab, top_k] I64, hash layers only
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct BlockWeights {
  int64_t layer = 0;
  int64_t compress_ratio = 0;
  bool hash_routed = false;
  TensorView attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  BlockWeights block;
  LinearWeight e_proj, h_proj;  // [D, D]
  TensorView enorm, hnorm, norm;
  HcWeights hc_head;
};

struct ModelWeights {
  TensorView embed;   // [vocab, D]
  LinearWeight head;  // [vocab, D]
  TensorView norm;    // [D]
  HcWeights hc_head;
  std::vector<BlockWeights> layers;
  std::vector<MtpWeights> mtp;
};

// Loads (or, from a dummy source, creates) every tensor the config calls for, checking names,
// shapes and dtypes; errors name the file and the tensor.
ModelWeights LoadWeights(const ModelConfig& config, WeightSource& source);

// Calls `fn` on every tensor view of the weights (linear weights' data and scales included).
void ForEachTensor(ModelWeights& weights, const std::function<void(TensorView&)>& fn);

// Tensors present in a checkpoint that the model did not ask for (reported at load).
std::vector<std::string> UnusedTensors(const Checkpoint& checkpoint, const WeightSource& source);

}  // namespace deepinfer::v4
