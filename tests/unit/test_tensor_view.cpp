// TensorView's views: a column range keeps the rows and their stride.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "base/error.h"
#include "tensor/tensor_view.h"

namespace deepinfer {
namespace {

TEST(TensorView, ColumnsKeepTheRowStride) {
  std::vector<float> buf(15);
  std::iota(buf.begin(), buf.end(), 0.f);
  const TensorView t(buf.data(), DType::kF32, {3, 5});
  const TensorView mid = t.Columns(1, 4);
  ASSERT_EQ(mid.ndim(), 2);
  EXPECT_EQ(mid.size(0), 3);
  EXPECT_EQ(mid.size(1), 3);
  EXPECT_EQ(mid.stride(0), 5);
  EXPECT_EQ(mid.stride(1), 1);
  EXPECT_FALSE(mid.is_contiguous());
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(mid.data<float>()[r * mid.stride(0) + c], buf[r * 5 + 1 + c]);
  }
  EXPECT_TRUE(t.Columns(0, 5).is_contiguous());
  EXPECT_EQ(t.Columns(5, 5).size(1), 0);
  EXPECT_EQ(t.Slice(1, 3).Columns(2, 5).data<float>(), buf.data() + 7);
}

TEST(TensorView, ColumnsRejectWhatIsNotThere) {
  std::vector<float> buf(15);
  const TensorView t(buf.data(), DType::kF32, {3, 5});
  EXPECT_THROW(t.Columns(2, 6), Error);
  EXPECT_THROW(t.Columns(3, 2), Error);
  EXPECT_THROW(t.Columns(-1, 2), Error);
  EXPECT_THROW(TensorView(buf.data(), DType::kF32, {15}).Columns(0, 1), Error);
}

}  // namespace
}  // namespace deepinfer
