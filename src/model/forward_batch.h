// ForwardBatch: what the model sees of one step — tokens, positions and where each sequence's
// state lives. Plain data; the model never sees requests.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tensor/tensor_view.h"

using cudaStream_t = struct CUstream_st*;

namespace deepinfer {

namespace ops {
class OpProfiler;
}

struct SequenceChunk {
  int64_t token_offset = 0;   // index of this chunk's first token in ForwardBatch::token_ids
  int64_t num_tokens = 0;     // tokens of this sequence in the step (prefill chunk or 1 decode)
  int64_t start_pos = 0;      // tokens already folded into the sequence's state
  int32_t state_slot = -1;    // fixed-state slot (windows, compressor partial state)
  const int32_t* block_table = nullptr;  // paged-row blocks, logical block i -> physical id
  int64_t num_blocks = 0;
  bool want_logits = true;    // produce logits for the chunk's last token
  // Where the sequence's prompt ends (0: treat this chunk's end as the prompt end). The CSA
  // indexer breaks ties between equal scores the way the reference's one-shot prefill does,
  // which depends on how many compressed rows the whole prompt has: a query inside the prompt
  // ranks the rows that exist at prompt_end, a later (decode) query the rows that exist at its
  // own position. With it, every chunking of a prompt selects what the one-shot prefill selects.
  int64_t prompt_end = 0;
};

struct ForwardBatch {
  const int32_t* token_ids = nullptr;  // [num_tokens], host memory
  // Optional, on the model's (CUDA) device: the step's input tokens, used instead of token_ids
  // (the runner feeds tokens the previous step sampled on the device this way).
  const int32_t* device_token_ids = nullptr;
  // When > 0: every launch shape of the step follows from the chunks' token counts alone, never
  // from positions (what a captured CUDA graph needs): the compressors run over one row per
  // token, the rows that close nowhere going to a scratch row, and the attention row lists are
  // sized for this many positions of context. Outputs are the same bit for bit either way.
  int64_t static_max_context = 0;
  // CUDA: the stream the step's work is queued on (null: the legacy default stream).
  cudaStream_t stream = nullptr;
  // CUDA graphs: every upload of the step goes to this page-locked area (owned by the graph) at
  // consecutive offsets; with record_only nothing is queued on the device (the host part of the
  // forward refills the staging a captured graph copies from). Model::LastStepStagedBytes() tells
  // how much a step staged.
  void* graph_staging = nullptr;
  size_t graph_staging_bytes = 0;
  // With graph_staging: device memory of graph_staging_bytes (owned by the graph beside its
  // staging) that the step's uploads go to in one copy at its start (Workspace::ResetForGraph);
  // null: one copy per upload.
  void* graph_uploads = nullptr;
  bool record_only = false;
  // CUDA: times every op of the step (benchmarks); the model sets its scope per layer.
  ops::OpProfiler* profiler = nullptr;
  int64_t num_tokens = 0;
  std::vector<SequenceChunk> seqs;
};

// Optional observation points for tests and tools.
struct ForwardHooks {
  // After block `layer` with its output residual streams [num_tokens, hc_mult, hidden] (f32) and
  // the absolute position of every token.
  std::function<void(int64_t layer, const TensorView& streams, const std::vector<int64_t>& positions)>
      on_block_output;
};

}  // namespace deepinfer
