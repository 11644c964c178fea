// CUDA row movement and attention row lists against their CPU twins (src/kernels/cpu/rows.h).
// Everything here is data movement or exact integer arithmetic, so every comparison is bit-exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/state_row.h"
#include "kernels/cuda/rows.h"

namespace deepinfer {
namespace {

using test::AllEqual;
using test::Bits;
using test::DeviceArray;

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// ---- GatherRows / ScatterRows ------------------------------------------------------------------

// Random bit patterns (NaN payloads and denormals included): a copy must keep every bit.
std::vector<float> RandomBitFloats(size_t n, uint64_t seed) {
  const std::vector<uint8_t> bytes = test::RandomBytes(n * sizeof(float), seed);
  std::vector<float> out(n);
  if (n > 0) std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  return out;
}

struct CopyCase {
  int64_t n, width, ld;
  bool aligned;  // offsets multiples of 4 floats (the 16-byte path where width and ld allow it)
};

// n distinct, non-overlapping rows of `width` floats: random slots of `pitch` floats out of 2n + 3,
// each row shifted inside its slot at random unless aligned. Sets *base_floats to the buffer size.
std::vector<int64_t> RandomRowOffsets(int64_t n, int64_t width, bool aligned, std::mt19937_64& rng,
                                      int64_t* base_floats) {
  const int64_t pitch = (width + 5 + 3) / 4 * 4;
  const int64_t num_slots = 2 * n + 3;
  std::vector<int64_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), int64_t{0});
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<int64_t> offsets(n);
  for (int64_t i = 0; i < n; ++i) offsets[i] = slots[i] * pitch + (aligned ? 0 : Uniform(rng, 0, pitch - width));
  *base_floats = num_slots * pitch;
  return offsets;
}

void PrintTo(const CopyCase& c, std::ostream* os) {
  *os << "n=" << c.n << " width=" << c.width << " ld=" << c.ld << (c.aligned ? " aligned" : " shifted");
}

class CudaCopyRows : public ::testing::TestWithParam<CopyCase> {};

TEST_P(CudaCopyRows, GatherBitExact) {
  DI_REQUIRE_GPU();
  const CopyCase c = GetParam();
  std::mt19937_64 rng(11 + c.n + c.width);
  int64_t base_floats = 0;
  const std::vector<int64_t> offsets = RandomRowOffsets(c.n, c.width, c.aligned, rng, &base_floats);
  const std::vector<float> base = RandomBitFloats(base_floats, 21);
  std::vector<float> want = RandomBitFloats(c.n * c.ld, 22);  // the padding must stay as it is
  DeviceArray<float> d_base(base), d_dst(want);
  DeviceArray<int64_t> d_offsets(offsets);
  cpu::GatherRows(base.data(), offsets.data(), c.n, c.width, want.data(), c.ld);
  cuda::GatherRows(d_base.get(), d_offsets.get(), c.n, c.width, d_dst.get(), c.ld, nullptr);
  EXPECT_TRUE(AllEqual(Bits(d_dst.ToHost()), Bits(want), "gather_rows dst"));
  EXPECT_TRUE(AllEqual(Bits(d_base.ToHost()), Bits(base), "gather_rows base untouched"));
}

TEST_P(CudaCopyRows, ScatterBitExact) {
  DI_REQUIRE_GPU();
  const CopyCase c = GetParam();
  std::mt19937_64 rng(31 + c.n + c.width);
  int64_t base_floats = 0;
  const std::vector<int64_t> offsets = RandomRowOffsets(c.n, c.width, c.aligned, rng, &base_floats);
  const std::vector<float> src = RandomBitFloats(c.n * c.ld, 41);
  std::vector<float> want = RandomBitFloats(base_floats, 42);
  DeviceArray<float> d_src(src), d_base(want);
  DeviceArray<int64_t> d_offsets(offsets);
  cpu::ScatterRows(src.data(), c.ld, c.n, c.width, want.data(), offsets.data());
  cuda::ScatterRows(d_src.get(), c.ld, c.n, c.width, d_base.get(), d_offsets.get(), nullptr);
  // The whole base: the scattered rows and every float around them.
  EXPECT_TRUE(AllEqual(Bits(d_base.ToHost()), Bits(want), "scatter_rows base"));
  EXPECT_TRUE(AllEqual(Bits(d_src.ToHost()), Bits(src), "scatter_rows src untouched"));
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, CudaCopyRows,
    ::testing::Values(CopyCase{0, 512, 516, true}, CopyCase{1, 37, 40, false}, CopyCase{300, 37, 41, false},
                      CopyCase{4096, 512, 516, true},   // a Flash step's KV rows
                      CopyCase{1000, 128, 132, true},   // index rows
                      CopyCase{777, 128, 131, false}, CopyCase{64, 512, 515, true},  // odd stride: mixed paths
                      CopyCase{2000, 512, 600, false},
                      CopyCase{1, 16384, 16384, true},  // the head's last hc streams at batch 1: 4 blocks
                      CopyCase{4, 4096, 4096, true},    // the embedding into 4 streams
                      CopyCase{3, 9001, 9003, false},   // 3 segments a row, the last short, 4-byte path
                      CopyCase{5, 8196, 8200, true}),   // 3 segments, the last one 4 floats
    [](const ::testing::TestParamInfo<CopyCase>& info) {
      const CopyCase& c = info.param;
      return "n" + std::to_string(c.n) + "_w" + std::to_string(c.width) + "_ld" + std::to_string(c.ld) +
             (c.aligned ? "_aligned" : "_shifted");
    });

// ---- BuildAttentionRows / AppendSelectedRows ---------------------------------------------------

struct GeoSpec {
  int64_t head_dim, index_dim, window, ratio, rows_per_block;
};

struct Chunk {
  int64_t start_pos, num_tokens, prompt_end;
};

// A step on the host: chunks in random order, distinct slots, block tables of shuffled physical ids.
struct HostPlan {
  std::vector<int32_t> token_seq;
  std::vector<int64_t> token_pos;
  std::vector<cpu::SeqRowsInfo> seqs;
  std::vector<int32_t> block_tables;
  int64_t num_slots = 0, num_blocks = 0, max_pos = 0;

  cpu::StepRowsPlan View() const {
    cpu::StepRowsPlan p;
    p.num_tokens = static_cast<int64_t>(token_pos.size());
    p.num_seqs = static_cast<int64_t>(seqs.size());
    p.token_seq = token_seq.data();
    p.token_pos = token_pos.data();
    p.seqs = seqs.data();
    p.block_tables = block_tables.data();
    return p;
  }
};

struct DevicePlan {
  explicit DevicePlan(const HostPlan& h)
      : token_seq(h.token_seq), token_pos(h.token_pos), seqs(h.seqs), block_tables(h.block_tables) {
    view.num_tokens = static_cast<int64_t>(h.token_pos.size());
    view.num_seqs = static_cast<int64_t>(h.seqs.size());
    view.token_seq = token_seq.get();
    view.token_pos = token_pos.get();
    view.seqs = seqs.get();
    view.block_tables = block_tables.get();
  }
  DeviceArray<int32_t> token_seq;
  DeviceArray<int64_t> token_pos;
  DeviceArray<cpu::SeqRowsInfo> seqs;
  DeviceArray<int32_t> block_tables;
  cpu::StepRowsPlan view;
};

// Prefill chunks from 0 and from start_pos > 0 (before and after the window fills), single-token
// decode chunks around the window edge and far out, prompt_end 0, past the chunk end, and (for
// decodes) already behind the token.
std::vector<Chunk> MakeChunks(std::mt19937_64& rng, int64_t w, int64_t max_pos) {
  std::vector<Chunk> chunks;
  chunks.push_back({0, w + 22, 0});
  const int64_t s1 = std::max<int64_t>(1, w / 3), n1 = w / 2 + 3;
  chunks.push_back({s1, n1, s1 + n1 + Uniform(rng, 1, 50)});
  chunks.push_back({Uniform(rng, w, max_pos / 2), Uniform(rng, 1, 3 * w), 0});
  const int64_t s3 = Uniform(rng, max_pos / 2, max_pos - 3 * w), n3 = Uniform(rng, w, 3 * w);
  chunks.push_back({s3, n3, s3 + n3 + Uniform(rng, 1, max_pos)});
  const int64_t decode_pos[] = {0, 1, w - 1, w, w + 1, Uniform(rng, 0, max_pos), max_pos};
  int kind = 0;
  for (int64_t p : decode_pos) {
    int64_t prompt_end = 0;
    if (kind == 1) prompt_end = p + 1 + Uniform(rng, 1, 100);  // the prompt goes on past this token
    if (kind == 2 && p > 0) prompt_end = Uniform(rng, 1, p);    // generating: the prompt ended before
    chunks.push_back({p, 1, prompt_end});
    kind = (kind + 1) % 3;
  }
  const int64_t p = 4 * Uniform(rng, w, max_pos / 4 - 1) + 3;  // the prompt ended right at p: p + 1 ≡ 0 mod 4
  chunks.push_back({p, 1, p});
  return chunks;
}

HostPlan MakePlan(std::vector<Chunk> chunks, const GeoSpec& geo, std::mt19937_64& rng) {
  std::shuffle(chunks.begin(), chunks.end(), rng);
  HostPlan h;
  h.num_slots = static_cast<int64_t>(chunks.size()) + 5;
  std::vector<int64_t> slots(h.num_slots);
  std::iota(slots.begin(), slots.end(), int64_t{0});
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<int64_t> blocks_needed;
  int64_t total_blocks = 0;
  for (const Chunk& c : chunks) {
    const int64_t rows = geo.ratio ? (c.start_pos + c.num_tokens) / geo.ratio : 0;  // compressed rows seen
    const int64_t nb = geo.rows_per_block ? (rows + geo.rows_per_block - 1) / geo.rows_per_block + 1 : 0;
    blocks_needed.push_back(nb);
    total_blocks += nb;
  }
  h.num_blocks = 2 * total_blocks + 3;
  std::vector<int32_t> physical(h.num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  for (size_t b = 0; b < chunks.size(); ++b) {
    const Chunk& c = chunks[b];
    cpu::SeqRowsInfo s;
    s.token_offset = static_cast<int64_t>(h.token_pos.size());
    s.num_tokens = c.num_tokens;
    s.start_pos = c.start_pos;
    s.slot = slots[b];
    s.prompt_end = c.prompt_end;
    s.block_offset = static_cast<int64_t>(h.block_tables.size());
    for (int64_t j = 0; j < blocks_needed[b]; ++j) h.block_tables.push_back(physical[h.block_tables.size()]);
    for (int64_t k = 0; k < c.num_tokens; ++k) {
      h.token_seq.push_back(static_cast<int32_t>(b));
      h.token_pos.push_back(c.start_pos + k);
      h.max_pos = std::max(h.max_pos, c.start_pos + k);
    }
    h.seqs.push_back(s);
  }
  return h;
}

// Slots, then paged blocks, then the fresh rows; every offset a multiple of lcm(head_dim,
// index_dim), with gaps between the regions so a wrong base shows up as a wrong id.
cpu::LayerRowGeometry MakeGeometry(const GeoSpec& s, int64_t num_slots, int64_t num_blocks) {
  const int64_t l = std::lcm(s.head_dim, s.index_dim);
  const auto up = [l](int64_t x) { return (x + l - 1) / l * l; };
  cpu::LayerRowGeometry g;
  g.row_floats = s.head_dim;
  g.index_dim = s.index_dim;
  g.window = s.window;
  g.ratio = s.ratio;
  g.rows_per_block = s.rows_per_block;
  g.slots_base = 3 * l;
  g.window_offset = 2 * l;
  g.slot_floats = up(g.window_offset + s.window * s.head_dim) + l;
  g.blocks_base = g.slots_base + num_slots * g.slot_floats + l;
  g.main_rows_offset = l;
  g.index_rows_offset = up(g.main_rows_offset + s.rows_per_block * s.head_dim) + l;
  g.block_floats = up(g.index_rows_offset + s.rows_per_block * s.index_dim) + 2 * l;
  g.fresh_base = g.blocks_base + num_blocks * g.block_floats + l;
  return g;
}

struct RowsCase {
  std::string name;
  GeoSpec geo;
  int64_t max_pos, top_k;
  uint64_t seed;
};

void PrintTo(const RowsCase& c, std::ostream* os) { *os << c.name; }

class CudaAttentionRows : public ::testing::TestWithParam<RowsCase> {};

TEST_P(CudaAttentionRows, BuildAndAppendMatchCpu) {
  DI_REQUIRE_GPU();
  const RowsCase& c = GetParam();
  std::mt19937_64 rng(c.seed);
  const HostPlan h = MakePlan(MakeChunks(rng, c.geo.window, c.max_pos), c.geo, rng);
  const cpu::LayerRowGeometry g = MakeGeometry(c.geo, h.num_slots, h.num_blocks);
  const int64_t m = static_cast<int64_t>(h.token_pos.size());
  ASSERT_LT((g.fresh_base + m * g.row_floats) / g.row_floats, int64_t{INT32_MAX});  // ids fit int32
  const int64_t ratio = c.geo.ratio;
  const int64_t max_rows = c.geo.window + (ratio == 128 ? (h.max_pos + 1) / 128 : 0) + c.top_k + 3;
  const int64_t max_index_rows = (ratio == 4 ? (h.max_pos + 1) / 4 : 0) + 2;
  const cpu::StepRowsPlan hp = h.View();
  const DevicePlan dp(h);

  // Every output starts as a sentinel on both sides: entries neither side writes must agree too.
  constexpr int32_t kSentinel = -5;
  std::vector<int32_t> ids(m * max_rows, kSentinel), counts(m, kSentinel), index_ids(m * max_index_rows, kSentinel),
      num_visible(m, kSentinel), num_candidates(m, kSentinel);
  DeviceArray<int32_t> d_ids(ids), d_counts(counts), d_index_ids(index_ids), d_num_visible(num_visible),
      d_num_candidates(num_candidates);
  cpu::BuildAttentionRows(hp, g, ids.data(), counts.data(), max_rows, index_ids.data(), num_visible.data(),
                          num_candidates.data(), max_index_rows);
  cuda::BuildAttentionRows(dp.view, g, d_ids.get(), d_counts.get(), max_rows, d_index_ids.get(), d_num_visible.get(),
                           d_num_candidates.get(), max_index_rows, nullptr);
  EXPECT_TRUE(AllEqual(d_ids.ToHost(), ids, "row_ids"));
  EXPECT_TRUE(AllEqual(d_counts.ToHost(), counts, "counts"));
  EXPECT_TRUE(AllEqual(d_index_ids.ToHost(), index_ids, "index_ids"));
  EXPECT_TRUE(AllEqual(d_num_visible.ToHost(), num_visible, "num_visible"));
  EXPECT_TRUE(AllEqual(d_num_candidates.ToHost(), num_candidates, "num_candidates"));
  // The plan reaches the intended sizes (CSA ~max_pos/4 index rows, HCA ~max_pos/128 rows).
  const int32_t max_count = *std::max_element(counts.begin(), counts.end());
  EXPECT_EQ(max_count, c.geo.window + (ratio == 128 ? (h.max_pos + 1) / 128 : 0));
  if (ratio == 4) {
    EXPECT_EQ(*std::max_element(num_visible.begin(), num_visible.end()), (h.max_pos + 1) / 4);
  }

  {  // Without index outputs: num_visible / num_candidates are left alone.
    std::vector<int32_t> ids2(m * max_rows, kSentinel), counts2(m, kSentinel), untouched(m, kSentinel);
    DeviceArray<int32_t> d_ids2(ids2), d_counts2(counts2), d_nv2(untouched), d_nc2(untouched);
    cpu::BuildAttentionRows(hp, g, ids2.data(), counts2.data(), max_rows, nullptr, nullptr, nullptr, 0);
    cuda::BuildAttentionRows(dp.view, g, d_ids2.get(), d_counts2.get(), max_rows, nullptr, d_nv2.get(), d_nc2.get(),
                             0, nullptr);
    EXPECT_TRUE(AllEqual(d_ids2.ToHost(), ids2, "row_ids (no index)"));
    EXPECT_TRUE(AllEqual(d_counts2.ToHost(), counts2, "counts (no index)"));
    EXPECT_TRUE(AllEqual(d_nv2.ToHost(), untouched, "num_visible untouched"));
    EXPECT_TRUE(AllEqual(d_nc2.ToHost(), untouched, "num_candidates untouched"));
  }

  if (c.geo.rows_per_block == 0) return;  // no compressed rows to append
  // Random ascending selections among each token's visible compressed rows, count <= top_k (every
  // third token fewer than it could take, some of them none).
  std::vector<int32_t> selected(m * c.top_k, -1), selected_counts(m);
  for (int64_t t = 0; t < m; ++t) {
    const int64_t visible = (h.token_pos[t] + 1) / ratio;
    const int64_t cap = std::min(c.top_k, visible);
    const int64_t k = t % 3 == 0 ? Uniform(rng, 0, cap) : cap;
    std::vector<int32_t> population(visible);
    std::iota(population.begin(), population.end(), 0);
    std::sample(population.begin(), population.end(), selected.begin() + t * c.top_k, k, rng);  // keeps order
    selected_counts[t] = static_cast<int32_t>(k);
  }
  DeviceArray<int32_t> d_selected(selected), d_selected_counts(selected_counts), d_ids3(ids), d_counts3(counts);
  cpu::AppendSelectedRows(hp, g, selected.data(), selected_counts.data(), c.top_k, ids.data(), counts.data(),
                          max_rows);
  cuda::AppendSelectedRows(dp.view, g, d_selected.get(), d_selected_counts.get(), c.top_k, d_ids3.get(),
                           d_counts3.get(), max_rows, nullptr);
  EXPECT_TRUE(AllEqual(d_ids3.ToHost(), ids, "row_ids after append"));
  EXPECT_TRUE(AllEqual(d_counts3.ToHost(), counts, "counts after append"));
}

// Flash: head_dim 512, index_dim 128, window 128, block_size 256 (64 CSA rows or 2 HCA rows per
// block), positions to 20000 (~5000 CSA index rows, ~156 HCA rows), index top-512. Then small
// odd geometries.
INSTANTIATE_TEST_SUITE_P(
    Gpu, CudaAttentionRows,
    ::testing::Values(RowsCase{"flash_window", {512, 128, 128, 0, 0}, 20000, 512, 1},
                      RowsCase{"flash_csa", {512, 128, 128, 4, 64}, 20000, 512, 2},
                      RowsCase{"flash_hca", {512, 128, 128, 128, 2}, 20000, 512, 3},
                      RowsCase{"odd_window", {64, 32, 5, 0, 0}, 1500, 7, 4},
                      RowsCase{"odd_csa", {64, 32, 5, 4, 3}, 1500, 7, 5},
                      RowsCase{"odd_hca", {64, 32, 5, 128, 2}, 1500, 7, 6},
                      RowsCase{"odd_csa_lcm", {64, 48, 7, 4, 5}, 1500, 9, 7}),
    [](const ::testing::TestParamInfo<RowsCase>& info) { return info.param.name; });

TEST(CudaAttentionRowsEmpty, NoTokensIsANoOp) {
  DI_REQUIRE_GPU();
  const cpu::StepRowsPlan plan;
  cpu::LayerRowGeometry g;
  g.row_floats = 512;
  g.index_dim = 128;
  g.window = 128;
  g.ratio = 4;
  g.rows_per_block = 64;
  cuda::BuildAttentionRows(plan, g, nullptr, nullptr, 0, nullptr, nullptr, nullptr, 0, nullptr);
  cuda::AppendSelectedRows(plan, g, nullptr, nullptr, 512, nullptr, nullptr, 0, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize(), "empty step");
}

// ---- Packed rows (kernels/cpu/state_row.h) -----------------------------------------------------

// Rows of mixed kinds: uniform values, values spread over many binades, blocks below the 1e-4 amax
// floor, signed zeros, e4m3 ties, and every eleventh row with an infinity, a NaN and a -inf
// (unrounded: the encoder rounds them as Fp8RoundTrip would).
std::vector<float> MixedRows(int64_t n, int64_t dim, uint64_t seed) {
  std::vector<float> x = test::RandomFloats(static_cast<size_t>(n * dim), seed);
  std::mt19937_64 rng(seed + 1);
  for (int64_t r = 0; r < n; ++r) {
    float* row = x.data() + r * dim;
    for (int64_t c = 0; c < dim; ++c) {
      switch ((r + c / 32) % 5) {
        case 1: row[c] = std::ldexp(row[c], static_cast<int>(Uniform(rng, -30, 30))); break;
        case 2: row[c] *= 1e-6f; break;
        case 3: row[c] = c % 2 ? -0.f : 0.f; break;
        case 4: row[c] = std::ldexp(1.f + 0.0625f * static_cast<float>(c % 16), static_cast<int>(r % 9) - 4); break;
        default: break;
      }
    }
    if (r % 11 == 0) {
      row[(r * 7) % dim] = std::numeric_limits<float>::infinity();
      row[(r * 13 + 5) % dim] = std::numeric_limits<float>::quiet_NaN();
      row[dim - 1 - r % 3] = -std::numeric_limits<float>::infinity();
    }
  }
  return x;
}

// cuda::PackRows writes cpu::PackRows's bytes, padding included, and nothing else: to scattered
// offsets and contiguously, for V4's rows, V4.1's window rows and a format with a partial block.
TEST(CudaPackedRows, PackRowsBytesEqualTheCpus) {
  DI_REQUIRE_GPU();
  for (const cpu::PackedRowFormat& f :
       {cpu::kV4MainRow, cpu::PackedRowFormat{512, 512, 32}, cpu::PackedRowFormat{128, 96, 64}}) {
    SCOPED_TRACE(testing::Message() << "format " << f.dim << "/" << f.fp8_end << "/" << f.block);
    const int64_t n = 300, pitch = f.row_pitch() / 4, ld = f.dim + 3;
    const std::vector<float> src = MixedRows(n, ld, 51 + f.fp8_end);
    std::mt19937_64 rng(52);
    std::vector<int64_t> slots(2 * n + 1);
    std::iota(slots.begin(), slots.end(), int64_t{0});
    std::shuffle(slots.begin(), slots.end(), rng);
    std::vector<int64_t> offsets(n);
    for (int64_t i = 0; i < n; ++i) offsets[i] = 8 + slots[i] * pitch;
    const int64_t base_floats = 8 + (2 * n + 1) * pitch;
    for (bool scattered : {true, false}) {
      std::vector<float> want = RandomBitFloats(base_floats, 53);
      DeviceArray<float> d_src(src), d_base(want);
      DeviceArray<int64_t> d_offsets(offsets);
      cpu::PackRows(f, src.data(), ld, n, want.data(), scattered ? offsets.data() : nullptr, 8);
      cuda::PackRows(f, d_src.get(), ld, n, d_base.get(), scattered ? d_offsets.get() : nullptr, 8, nullptr);
      EXPECT_TRUE(AllEqual(Bits(d_base.ToHost()), Bits(want), scattered ? "scattered rows" : "contiguous rows"));
    }
  }
}

// cuda::FillHashPackedRows writes cpu::FillHashPackedRows's bytes and nothing else.
TEST(CudaPackedRows, FillHashBytesEqualTheCpus) {
  DI_REQUIRE_GPU();
  const cpu::PackedRowFormat f = cpu::kV4MainRow;
  const cpu::PackedRowRegions regions{100, 5 * (f.row_pitch() / 4) + 12, 7, 4};
  const int64_t base_floats = regions.first + regions.regions * regions.region_stride;
  std::vector<float> want = RandomBitFloats(base_floats, 61);
  DeviceArray<float> d_base(want);
  cpu::FillHashPackedRows(f, regions, 62, want.data());
  cuda::FillHashPackedRows(f, regions, 62, d_base.get(), nullptr);
  EXPECT_TRUE(AllEqual(Bits(d_base.ToHost()), Bits(want), "filled rows"));
}

}  // namespace
}  // namespace deepinfer
