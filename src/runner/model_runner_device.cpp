// ModelRunner on a CUDA device: steps are queued, sampled on the device, and their results read
// back one step behind (model_runner.h has the contract).
//
// Per step N (parity N % 2 picks its buffers):
//   compute stream (the model's): input-token upload, then the tokens step N−1 sampled copied in
//     on the device; forward; pack-logits copies; SampleRows; post-step state copies.
//   copy stream: waits for the sampling, copies the sampled ids, logprobs and top logprobs to
//     page-locked memory, then a host callback wakes the runner thread and an event marks them
//     landed.
// Step N's buffers are reused by step N+2, which is queued only after step N has finished.
#include <algorithm>
#include <cstring>
#include <optional>

#include "base/error.h"
#include "base/timer.h"
#include "device/graph_paths.h"
#include "model/workspace.h"
#include "ops/ops.h"
#include "runner/device_io.h"
#include "sampling/sampler.h"

namespace deepinfer {

namespace {

bool HasPenalty(const SamplingParams& p) {
  return p.repetition_penalty != 1.f || p.presence_penalty != 0.f || p.frequency_penalty != 0.f;
}

// Byte layout of one step's results in page-locked memory.
struct ResultLayout {
  explicit ResultLayout(int64_t rows)
      : ids(0),
        logprobs(ids + rows * sizeof(int32_t)),
        top_ids(logprobs + rows * sizeof(float)),
        top_logprobs(top_ids + rows * kSamplerMaxLogprobs * sizeof(int32_t)),
        bytes(top_logprobs + rows * kSamplerMaxLogprobs * sizeof(float)) {}
  size_t ids, logprobs, top_ids, top_logprobs, bytes;
};

// CUDA graphs: decode batches run padded to the next power of two, the last bucket being
// `largest` itself.
int64_t DecodeBucket(int64_t num_seqs, int64_t largest) {
  int64_t bucket = 1;
  while (bucket < num_seqs) bucket *= 2;
  return std::min(bucket, largest);
}

std::vector<int64_t> DecodeBuckets(int64_t largest) {
  std::vector<int64_t> buckets;
  for (int64_t b = 1; b < largest; b *= 2) buckets.push_back(b);
  buckets.push_back(largest);
  return buckets;
}

}  // namespace

void ModelRunner::OnDeviceStepLanded(void* runner) {
  auto* self = static_cast<ModelRunner*>(runner);
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    ++self->device_steps_landed_;
  }
  self->cv_.notify_all();
}

float* ModelRunner::DevicePackLogits(int32_t pack_slot) {
  const int64_t vocab = model_.config().vocab_size;
  const int32_t pack = pack_slot - options_.num_slots;
  DI_CHECK(pack >= 0 && pack < options_.num_pack_slots, "slot {} is not a pack slot", pack_slot);
  DeviceIo& io = *device_io_;
  if (io.pack_logits.size() == 0) {
    io.pack_logits = Buffer(static_cast<size_t>(options_.num_pack_slots * vocab) * sizeof(float), model_.device());
  }
  return io.pack_logits.as<float>() + static_cast<int64_t>(pack) * vocab;
}

void ModelRunner::PadDecodeBatch(ForwardBatch& batch, std::vector<int32_t>& ids, int64_t bucket) const {
  // Sequences at position 0 on the reserved slot and block; their logits are never read.
  for (int64_t i = static_cast<int64_t>(ids.size()); i < bucket; ++i) {
    SequenceChunk pad;
    pad.token_offset = i;
    pad.num_tokens = 1;
    pad.start_pos = 0;
    pad.state_slot = options_.num_slots + options_.num_pack_slots;
    pad.block_table = &padding_block_;
    pad.num_blocks = 1;
    pad.want_logits = true;
    batch.seqs.push_back(pad);
    ids.push_back(0);
  }
  batch.static_max_context = options_.max_model_len;
}

void ModelRunner::CaptureDecodeGraphs() {
  DeviceIo& io = *device_io_;
  const int64_t vocab = model_.config().vocab_size;
  const int64_t largest = options_.num_slots;
  for (int p = 0; p < 2; ++p) {
    io.graph_ids[p] = Buffer(static_cast<size_t>(largest) * sizeof(int32_t), model_.device());
    io.graph_logits[p] = Buffer(static_cast<size_t>(largest * vocab) * sizeof(float), model_.device());
  }
  for (const int64_t bucket : DecodeBuckets(largest)) {
    for (int p = 0; p < 2; ++p) {
      auto graph = std::make_unique<DeviceIo::DecodeGraph>();
      std::vector<int32_t> ids;
      ForwardBatch batch;
      batch.stream = io.op.stream;
      PadDecodeBatch(batch, ids, bucket);
      batch.token_ids = ids.data();
      batch.num_tokens = bucket;
      ops::CopyBytesAsync(io.op, io.graph_ids[p].data(), ids.data(), ids.size() * sizeof(int32_t));
      batch.device_token_ids = io.graph_ids[p].as<int32_t>();
      const TensorView logits(io.graph_logits[p].data(), DType::kF32, {bucket, vocab}, model_.device());
      // Eagerly first: the workspace allocates what the graph will use; the uploads are measured.
      model_.Forward(batch, *state_, logits);
      graph->staged_bytes = model_.LastStepStagedBytes();
      graph->staging = PinnedBuffer(std::max<size_t>(graph->staged_bytes, 1));
      batch.graph_staging = graph->staging.data();
      batch.graph_staging_bytes = graph->staging.size();
      if (GraphUploadsInOneCopy()) {
        graph->uploads = Buffer(graph->staging.size(), model_.device());
        batch.graph_uploads = graph->uploads.data();
      }
      CudaGraph::BeginCapture(io.op.stream);
      try {
        model_.Forward(batch, *state_, logits);
      } catch (...) {
        try {
          graph->graph.EndCapture(io.op.stream);
        } catch (...) {
          // The forward's error is the one to report.
        }
        throw;
      }
      graph->graph.EndCapture(io.op.stream, ProgrammaticEdgesForTokens(bucket));
      DI_CHECK(model_.LastStepStagedBytes() == graph->staged_bytes,
               "decode graph for {} sequences: the captured step staged {} bytes, the eager one {}", bucket,
               model_.LastStepStagedBytes(), graph->staged_bytes);
      io.graphs[{bucket, p}] = std::move(graph);
    }
  }
  io.compute.Synchronize();
}

void ModelRunner::DeviceWorkerLoop() {
  std::optional<DeviceStep> pending;
  auto finish_pending = [&] {
    if (!pending) return;
    Outcome outcome;
    try {
      outcome.result = Finish(*pending);
    } catch (...) {
      outcome.error = std::current_exception();
      outcome.result.step_id = pending->result.step_id;
    }
    const uint64_t step_id = pending->result.step_id;
    pending.reset();
    Post(step_id, std::move(outcome));
  };
  for (;;) {
    SchedulerOutput out;
    bool have = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !queue_.empty() || (pending && device_steps_landed_ >= pending->callback);
      });
      if (!queue_.empty()) {
        out = std::move(queue_.front());
        queue_.pop_front();
        have = true;
      } else if (!pending) {
        return;  // stopping, nothing in flight
      }
    }
    if (!have) {  // the step in flight landed (or the runner is stopping): return its results
      finish_pending();
      continue;
    }
    std::optional<DeviceStep> next;
    Outcome failed;
    try {
      next = Enqueue(out, finish_pending);
    } catch (...) {
      failed.error = std::current_exception();
      failed.result.step_id = out.step_id;
    }
    finish_pending();  // step N's results, while step N+1 runs
    if (next) {
      pending = std::move(next);
    } else {
      if (device_timer_) {  // close the failed step's span so later steps measure their own
        try {
          double busy = 0, idle = 0;
          device_timer_->StepFinished();
          device_timer_->Measure(&busy, &idle);
        } catch (...) {
          // The step's error is what gets reported; a device too broken to time reports again.
        }
      }
      Post(out.step_id, std::move(failed));
    }
  }
}

ModelRunner::DeviceStep ModelRunner::Enqueue(const SchedulerOutput& out, const std::function<void()>& finish_previous) {
  DeviceIo& io = *device_io_;
  DeviceStep step;
  step.result.step_id = out.step_id;
  step.result.started_at = NowSeconds();
  step.number = io.next_number++;
  const int parity = static_cast<int>(step.number & 1);
  if (device_timer_) device_timer_->StepStarted();
  BeginStep(out);
  // Penalties read the whole history on the host side of the parameters: let the previous
  // step's tokens land first.
  for (const ScheduledChunk& c : out.chunks) {
    const SequenceMirror& m = seqs_.at(c.seq_id);
    if (c.sample && m.pending > 0 && HasPenalty(m.sampling)) {
      finish_previous();
      break;
    }
  }

  Workspace& ws = *io.ws[parity];
  ws.Reset(io.op);
  const int64_t vocab = model_.config().vocab_size;
  ForwardBatch batch;
  batch.stream = io.op.stream;
  std::vector<int32_t> ids, patch_dst, patch_src;
  ids.reserve(static_cast<size_t>(out.num_tokens()));
  std::vector<SeqId> sample_order;
  for (const ScheduledChunk& c : out.chunks) {
    const SequenceMirror& m = seqs_.at(c.seq_id);
    const int64_t known = static_cast<int64_t>(m.tokens.size());
    const SequenceChunk sc = ChunkFor(c, m, static_cast<int64_t>(ids.size()));
    for (int64_t j = c.start_pos; j < c.start_pos + c.num_tokens; ++j) {
      if (j < known) {
        ids.push_back(m.tokens[j]);
        continue;
      }
      // The token the previous step sampled for this sequence, still on the device.
      DI_CHECK(j == known && m.pending == 1 && m.last_step == io.last_number,
               "sequence {}: token {} is not the one the previous step sampled", c.seq_id, j);
      patch_dst.push_back(static_cast<int32_t>(ids.size()));
      patch_src.push_back(m.last_row);
      ids.push_back(0);
    }
    batch.seqs.push_back(sc);
    if (c.sample) sample_order.push_back(c.seq_id);
  }
  const int64_t num_tokens = static_cast<int64_t>(ids.size());
  const int64_t forward_rows = static_cast<int64_t>(sample_order.size());
  const int64_t rows = forward_rows + static_cast<int64_t>(out.pack_samples.size());

  // A decode step (every sequence one token, each sampling) runs as a CUDA graph.
  bool graph_step = !io.graphs.empty() && !batch.seqs.empty() && out.pack_samples.empty() &&
                    static_cast<int64_t>(batch.seqs.size()) <= options_.num_slots;
  for (const SequenceChunk& sc : batch.seqs) graph_step &= sc.num_tokens == 1 && sc.want_logits;
  const DeviceIo::DecodeGraph* graph = nullptr;
  if (graph_step) {
    const int64_t bucket = DecodeBucket(num_tokens, options_.num_slots);
    graph = io.graphs.at({bucket, parity}).get();
    PadDecodeBatch(batch, ids, bucket);
  }
  batch.token_ids = ids.data();
  batch.num_tokens = static_cast<int64_t>(ids.size());
  if (batch.num_tokens > 0) {
    TensorView device_ids;
    if (graph != nullptr) {
      device_ids = TensorView(io.graph_ids[parity].data(), DType::kI32, {batch.num_tokens}, model_.device());
      ops::CopyBytesAsync(io.op, device_ids.raw(), ids.data(), ids.size() * sizeof(int32_t));
    } else {
      device_ids = ws.Upload(io.op, ids.data(), DType::kI32, {batch.num_tokens});
    }
    if (!patch_dst.empty()) {
      const int64_t n = static_cast<int64_t>(patch_dst.size());
      ops::CopyIndexedTokens(io.op, device_ids, ws.Upload(io.op, patch_dst.data(), DType::kI32, {n}), io.last_sampled,
                             ws.Upload(io.op, patch_src.data(), DType::kI32, {n}));
    }
    batch.device_token_ids = device_ids.data<int32_t>();
  }

  const TensorView logits =
      graph != nullptr
          ? TensorView(io.graph_logits[parity].data(), DType::kF32, {batch.num_tokens, vocab}, model_.device())
          : ws.Alloc(DType::kF32, {std::max<int64_t>(rows, 1), vocab});
  auto logits_row = [&](int64_t r) { return logits.data<float>() + r * vocab; };
  if (graph == nullptr) {
    if (!batch.seqs.empty()) {
      model_.Forward(batch, *state_, TensorView(logits.raw(), DType::kF32, {forward_rows, vocab}, model_.device()));
    }
  } else {
    // Refill the staging the graph's copies read, then replay.
    batch.graph_staging = graph->staging.data();
    batch.graph_staging_bytes = graph->staging.size();
    batch.graph_uploads = graph->uploads.data();  // null where the capture took one copy per upload
    batch.record_only = true;
    model_.Forward(batch, *state_, logits);
    DI_CHECK(model_.LastStepStagedBytes() == graph->staged_bytes,
             "a decode graph's step staged {} bytes, its capture {}", model_.LastStepStagedBytes(), graph->staged_bytes);
    graph->graph.Launch(io.op.stream);
    step.result.cuda_graph = true;
  }
  // Prompt-end packs keep the raw logits; whole prompts restored from a pack sample from them.
  for (const PackCopy& c : out.post_copies) {
    if (c.logits_of == 0) continue;
    const auto r = std::find(sample_order.begin(), sample_order.end(), c.logits_of) - sample_order.begin();
    DI_CHECK(r < forward_rows, "pack logits of sequence {} which did not sample", c.logits_of);
    ops::CopyBytesAsync(io.op, DevicePackLogits(c.to_slot), logits_row(r), vocab * sizeof(float));
  }
  for (size_t i = 0; i < out.pack_samples.size(); ++i) {
    ops::CopyBytesAsync(io.op, logits_row(forward_rows + static_cast<int64_t>(i)),
                        DevicePackLogits(out.pack_samples[i].pack_slot), vocab * sizeof(float));
    sample_order.push_back(out.pack_samples[i].seq_id);
  }

  // Per-row sampling parameters; histories and stop ids only where a row reads them.
  std::vector<SamplerRowParams> params;
  std::vector<int32_t> history, stop_ids;
  bool any_logprobs = false;
  for (int64_t r = 0; r < rows; ++r) {
    const SeqId id = sample_order[r];
    SequenceMirror& m = seqs_.at(id);
    const SamplingParams& s = m.sampling;
    SamplerRowParams p = sampling::DeviceRowParams(s, m.rng_seed, m.prompt_len,
                                                   static_cast<int64_t>(m.tokens.size()) + m.pending - m.prompt_len);
    if (HasPenalty(s)) {
      DI_CHECK(m.pending == 0, "sequence {}: penalties need the whole history on the host", id);
      p.history_offset = static_cast<int64_t>(history.size());
      history.insert(history.end(), m.tokens.begin(), m.tokens.end());
    }
    if (p.num_outputs < s.min_tokens) {
      p.stop_ids_offset = static_cast<int64_t>(stop_ids.size());
      stop_ids.insert(stop_ids.end(), options_.eos_token_ids.begin(), options_.eos_token_ids.end());
      stop_ids.insert(stop_ids.end(), s.stop_token_ids.begin(), s.stop_token_ids.end());
      p.num_stop_ids = static_cast<int32_t>(stop_ids.size() - p.stop_ids_offset);
    }
    any_logprobs |= s.logprobs >= 0;
    params.push_back(p);
    step.rows.push_back(id);
    step.generations.push_back(m.generation);
    step.logprobs.push_back(s.logprobs);
    m.pending += 1;
    m.last_row = static_cast<int32_t>(r);
    m.last_step = step.number;
  }
  const TensorView sampled = ws.Alloc(DType::kI32, {std::max<int64_t>(rows, 1)});
  const TensorView sampled_logprobs = ws.Alloc(DType::kF32, {std::max<int64_t>(rows, 1)});
  TensorView top_ids, top_logprobs;
  if (any_logprobs) {
    top_ids = ws.Alloc(DType::kI32, {rows, kSamplerMaxLogprobs});
    top_logprobs = ws.Alloc(DType::kF32, {rows, kSamplerMaxLogprobs});
  }
  if (rows > 0) {
    auto upload_i32 = [&](const std::vector<int32_t>& v) {
      return v.empty() ? TensorView()
                       : ws.Upload(io.op, v.data(), DType::kI32, {static_cast<int64_t>(v.size())});
    };
    const TensorView device_params = ws.Upload(io.op, params.data(), DType::kI8,
                                               {static_cast<int64_t>(params.size() * sizeof(SamplerRowParams))});
    const TensorView scratch =
        ws.Alloc(DType::kI8, {static_cast<int64_t>(ops::SamplerScratchBytes(rows, vocab))});
    ops::SampleRows(io.op, TensorView(logits.raw(), DType::kF32, {rows, vocab}, model_.device()),
                    options_.sampleable_vocab, device_params, upload_i32(history), upload_i32(stop_ids), scratch,
                    sampled, sampled_logprobs, top_ids, top_logprobs);
  }
  io.last_sampled = sampled;
  io.last_number = step.number;
  ApplyCopies(out.post_copies);
  if (device_timer_) device_timer_->StepFinished();

  // The results travel to the host on the copy stream.
  const ResultLayout layout(rows);
  if (io.results[parity].size() < layout.bytes) io.results[parity] = PinnedBuffer(2 * layout.bytes);
  io.sampled[parity]->Record(io.op.stream);
  io.sampled[parity]->StreamWait(io.copy_stream.get());
  const ops::OpContext copy{model_.device(), io.copy_stream.get()};
  char* host = io.results[parity].as<char>();
  if (rows > 0) {
    ops::CopyBytesAsync(copy, host + layout.ids, sampled.raw(), rows * sizeof(int32_t));
    ops::CopyBytesAsync(copy, host + layout.logprobs, sampled_logprobs.raw(), rows * sizeof(float));
    if (any_logprobs) {
      ops::CopyBytesAsync(copy, host + layout.top_ids, top_ids.raw(), top_ids.nbytes());
      ops::CopyBytesAsync(copy, host + layout.top_logprobs, top_logprobs.raw(), top_logprobs.nbytes());
    }
  }
  EnqueueHostCallback(io.copy_stream.get(), &ModelRunner::OnDeviceStepLanded, this);
  step.callback = ++io.callbacks;
  io.landed[parity]->Record(io.copy_stream.get());  // after the callback: once it is done, so is the callback
  return step;
}

StepResult ModelRunner::Finish(DeviceStep& step) {
  DeviceIo& io = *device_io_;
  const int parity = static_cast<int>(step.number & 1);
  io.landed[parity]->Synchronize();
  const int64_t rows = static_cast<int64_t>(step.rows.size());
  const ResultLayout layout(rows);
  const char* host = io.results[parity].as<char>();
  const auto* ids = reinterpret_cast<const int32_t*>(host + layout.ids);
  const auto* logprobs = reinterpret_cast<const float*>(host + layout.logprobs);
  const auto* top_ids = reinterpret_cast<const int32_t*>(host + layout.top_ids);
  const auto* top_logprobs = reinterpret_cast<const float*>(host + layout.top_logprobs);
  const int64_t vocab = model_.config().vocab_size;
  StepResult& result = step.result;
  for (int64_t r = 0; r < rows; ++r) {
    SampledToken st;
    st.seq_id = step.rows[r];
    st.token = ids[r];
    if (step.logprobs[r] >= 0) {
      st.logprob = logprobs[r];
      const int64_t k = std::min<int64_t>({step.logprobs[r], kSamplerMaxLogprobs, vocab});
      for (int64_t j = 0; j < k; ++j) {
        st.top.push_back({top_ids[r * kSamplerMaxLogprobs + j], top_logprobs[r * kSamplerMaxLogprobs + j]});
      }
    }
    // A sequence finished or re-added since this step was queued keeps its new mirror.
    auto it = seqs_.find(st.seq_id);
    if (it != seqs_.end() && it->second.generation == step.generations[r]) {
      it->second.tokens.push_back(st.token);
      it->second.pending -= 1;
    }
    result.sampled.push_back(std::move(st));
  }
  if (device_timer_) device_timer_->Measure(&result.device_busy_seconds, &result.device_idle_before_seconds);
  result.finished_at = NowSeconds();
  result.forward_seconds = result.finished_at - result.started_at;
  return result;
}

}  // namespace deepinfer
