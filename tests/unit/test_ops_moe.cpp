// ops::MoeCombine on the host: a token's output is the sum of its kept slots' expert rows in
// increasing expert id (then the shared expert's row), dropped slots (row -1) add nothing; and
// layouts the kernels cannot read (ye not [rows, d], slot arrays of the wrong size, a slot row past
// ye) are refused with a message instead of read out of bounds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "ops/ops.h"
#include "tensor/dtype.h"

namespace deepinfer {
namespace {

constexpr int64_t kTokens = 2, kTopK = 3, kWidth = 4, kRows = 5;

struct Case {
  std::vector<float> ye = std::vector<float>(kRows * kWidth);
  std::vector<int32_t> slot_rows = {2, -1, 0, 4, 1, 3};  // token 0: rows 2, (dropped), 0; token 1: rows 4, 1, 3
  std::vector<int32_t> expert_ids = {7, 1, 3, 9, 2, 5};
  std::vector<float> shared = std::vector<float>(kTokens * kWidth);
  std::vector<float> out = std::vector<float>(kTokens * kWidth, -1.f);

  Case() {
    // Powers of two apart, so any order of the additions gives the same sum only if the terms
    // are the ones intended: the expected values below are exact.
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t i = 0; i < kWidth; ++i) ye[r * kWidth + i] = static_cast<float>((r + 1) * 16 + i);
    }
    for (int64_t i = 0; i < kTokens * kWidth; ++i) shared[i] = 0.5f;
  }

  void Run(const TensorView& ye_view, const TensorView& slots_view) {
    ops::MoeCombine(ops::HostContext(), ye_view, slots_view,
                    TensorView(expert_ids.data(), DType::kI32, {kTokens, kTopK}), kTopK,
                    TensorView(shared.data(), DType::kF32, {kTokens, kWidth}),
                    TensorView(out.data(), DType::kF32, {kTokens, kWidth}));
  }
  void Run() {
    Run(TensorView(ye.data(), DType::kF32, {kRows, kWidth}), TensorView(slot_rows.data(), DType::kI32, {kTokens * kTopK}));
  }
};

TEST(OpsMoeCombine, SumsKeptSlotsAndTheSharedRow) {
  Case c;
  c.Run();
  for (int64_t i = 0; i < kWidth; ++i) {
    // Token 0: rows 0 (expert 3) and 2 (expert 7); token 1: rows 1 (expert 2), 3 (5), 4 (9).
    EXPECT_EQ(c.out[i], c.ye[0 * kWidth + i] + c.ye[2 * kWidth + i] + 0.5f) << "token 0, column " << i;
    EXPECT_EQ(c.out[kWidth + i], c.ye[1 * kWidth + i] + c.ye[3 * kWidth + i] + c.ye[4 * kWidth + i] + 0.5f)
        << "token 1, column " << i;
  }
}

// The error's message, or "" when the call went through.
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OpsMoeCombine, RefusesLayoutsTheKernelsCannotRead) {
  Case c;
  const TensorView slots(c.slot_rows.data(), DType::kI32, {kTokens * kTopK});
  // ye rows narrower than the output (a kernel would read row r at ye + r·d past the row).
  EXPECT_NE(ErrorOf([&] { c.Run(TensorView(c.ye.data(), DType::kF32, {kRows * kWidth / 2, 2}), slots); })
                .find("ye [10, 2] must be contiguous F32 [rows, 4]"),
            std::string::npos);
  // ye flat.
  EXPECT_NE(ErrorOf([&] { c.Run(TensorView(c.ye.data(), DType::kF32, {kRows * kWidth}), slots); }).find("moe_combine: ye"),
            std::string::npos);
  // One slot short.
  EXPECT_NE(ErrorOf([&] {
              c.Run(TensorView(c.ye.data(), DType::kF32, {kRows, kWidth}),
                    TensorView(c.slot_rows.data(), DType::kI32, {kTokens * kTopK - 1}));
            }).find("must hold 2 tokens x top_k 3 slots"),
            std::string::npos);
  // A slot row past ye's rows.
  c.slot_rows[3] = kRows;
  EXPECT_NE(ErrorOf([&] { c.Run(); }).find("slot row 5 past ye's 5 rows"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
