// Sampling ops on the device: the GPU twin of sampling::Sample, and the input-token copy that
// lets a step read the tokens the previous step sampled without a trip through the host.
#include "ops/dispatch.h"
#include "ops/ops.h"

#if DEEPINFER_HAS_CUDA
#include "kernels/cuda/sampler.h"
#endif

namespace deepinfer::ops {

namespace {
template <typename T>
T* PtrOrNull(const TensorView& t) {
  return t.empty() ? nullptr : static_cast<T*>(t.raw());
}
}  // namespace

void SampleRows(const OpContext& ctx, const TensorView& logits, int64_t sampleable_vocab, const TensorView& params,
                const TensorView& tokens, const TensorView& stop_ids, const TensorView& scratch,
                const TensorView& sampled, const TensorView& logprobs, const TensorView& top_ids,
                const TensorView& top_logprobs) {
  CheckDevice(ctx, "sample_rows",
              {&logits, &params, &tokens, &stop_ids, &scratch, &sampled, &logprobs, &top_ids, &top_logprobs});
  DI_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32 && logits.stride(1) == 1,
           "sample_rows: logits must be [rows, vocab] f32 with contiguous rows, got {}", logits.ShapeString());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  DI_CHECK(params.nbytes() >= static_cast<size_t>(rows) * sizeof(SamplerRowParams),
           "sample_rows: {} bytes of parameters for {} rows", params.nbytes(), rows);
  DI_CHECK(scratch.nbytes() >= SamplerScratchBytes(rows, vocab), "sample_rows: scratch of {} bytes, {} needed",
           scratch.nbytes(), SamplerScratchBytes(rows, vocab));
  DI_CHECK(sampled.dtype() == DType::kI32 && sampled.numel() >= rows, "sample_rows: sampled must be I32 [{}]", rows);
  DI_ON_CUDA(ctx, "sample_rows",
             cuda::SampleRows(logits.data<float>(), logits.stride(0), rows, vocab, sampleable_vocab,
                              static_cast<const SamplerRowParams*>(params.raw()), PtrOrNull<int32_t>(tokens),
                              PtrOrNull<int32_t>(stop_ids), scratch.raw(), sampled.data<int32_t>(),
                              PtrOrNull<float>(logprobs), PtrOrNull<int32_t>(top_ids), PtrOrNull<float>(top_logprobs),
                              ctx.stream));
  DI_THROW("sample_rows: on the host, sample with sampling::Sample");
}

size_t SamplerScratchBytes(int64_t rows, int64_t vocab) {
#if DEEPINFER_HAS_CUDA
  return cuda::SamplerScratchBytes(rows, vocab);
#else
  (void)rows, (void)vocab;
  return 0;  // no device sampler in this build
#endif
}

void CopyIndexedTokens(const OpContext& ctx, const TensorView& ids, const TensorView& dst_index,
                       const TensorView& src, const TensorView& src_index) {
  CheckDevice(ctx, "copy_indexed_tokens", {&ids, &dst_index, &src, &src_index});
  const int64_t n = dst_index.numel();
  DI_CHECK(src_index.numel() == n && ids.dtype() == DType::kI32 && src.dtype() == DType::kI32 &&
               dst_index.dtype() == DType::kI32 && src_index.dtype() == DType::kI32,
           "copy_indexed_tokens: I32 tensors and as many source as destination indices");
  if (n == 0) return;
  DI_ON_CUDA(ctx, "copy_indexed_tokens",
             cuda::CopyIndexedTokens(ids.data<int32_t>(), dst_index.data<int32_t>(), src.data<int32_t>(),
                                     src_index.data<int32_t>(), n, ctx.stream));
  int32_t* out = ids.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) out[dst_index.data<int32_t>()[i]] = src.data<int32_t>()[src_index.data<int32_t>()[i]];
}

}  // namespace deepinfer::ops
