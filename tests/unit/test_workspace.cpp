// Workspace on the host: Mark / Rewind release what a layer allocated, and the peak the step held.
// (The CUDA chunks' address reuse is checked in tests/gpu/test_model_gpu.cpp.)
#include <gtest/gtest.h>

#include "base/error.h"
#include "model/workspace.h"

namespace deepinfer {
namespace {

TEST(Workspace, RewindReleasesWhatWasAllocatedSinceTheMark) {
  Workspace ws(DeviceId{});
  const TensorView kept = ws.Alloc(DType::kF32, {10});  // 40 bytes
  EXPECT_EQ(ws.peak_bytes_in_use(), 40u);
  for (int layer = 0; layer < 5; ++layer) {
    const Workspace::Position start = ws.Mark();
    const TensorView a = ws.Alloc(DType::kF32, {100}), b = ws.Alloc(DType::kI32, {25});
    EXPECT_EQ(a.nbytes() + b.nbytes(), 500u);
    ws.Rewind(start);
  }
  // Five layers of 500 bytes each, one at a time.
  EXPECT_EQ(ws.peak_bytes_in_use(), 540u);
  EXPECT_EQ(kept.data<float>()[9], 0.f);  // still allocated (host tensors are zero-filled)
  const TensorView after = ws.Alloc(DType::kF32, {1000});
  EXPECT_EQ(ws.peak_bytes_in_use(), 4040u);
  EXPECT_EQ(after.nbytes(), 4000u);
}

TEST(Workspace, NestedMarksAndResetStartAFreshPeak) {
  Workspace ws(DeviceId{});
  const Workspace::Position outer = ws.Mark();
  ws.Alloc(DType::kF32, {8});
  const Workspace::Position inner = ws.Mark();
  ws.Alloc(DType::kF32, {16});
  ws.Rewind(inner);
  ws.Alloc(DType::kF32, {4});
  EXPECT_EQ(ws.peak_bytes_in_use(), 96u);  // 32 + 64
  ws.Rewind(outer);
  EXPECT_EQ(ws.peak_bytes_in_use(), 96u);
  ops::OpContext ctx{};
  ws.Reset(ctx);
  EXPECT_EQ(ws.peak_bytes_in_use(), 0u);
}

TEST(Workspace, RewindPastAResetIsAnError) {
  Workspace ws(DeviceId{});
  ws.Alloc(DType::kF32, {8});
  const Workspace::Position late = ws.Mark();
  ops::OpContext ctx{};
  ws.Reset(ctx);
  EXPECT_THROW(ws.Rewind(late), Error);
}

}  // namespace
}  // namespace deepinfer
