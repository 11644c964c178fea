// The read patterns' host side: their rules, the standard set, the word sum and the JSON report.
#include "bench/read_patterns.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace deepinfer::bench {

void ValidateReadPattern(const ReadPattern& p) {
  const char* name = p.name.c_str();
  DI_CHECK(p.block_rows > 0 && p.rows > 0 && p.rows % p.block_rows == 0,
           "read pattern {}: rows ({}) must be a positive multiple of block_rows ({})", name, p.rows, p.block_rows);
  DI_CHECK(p.chunk_bytes > 0 && p.chunk_bytes % 16 == 0, "read pattern {}: chunk_bytes ({}) must be a multiple of 16",
           name, p.chunk_bytes);
  DI_CHECK(p.row_bytes > 0 && p.row_bytes % p.chunk_bytes == 0,
           "read pattern {}: row_bytes ({}) must be a positive multiple of chunk_bytes ({})", name, p.row_bytes,
           p.chunk_bytes);
  DI_CHECK(p.stages >= 2 && p.stages <= 8, "read pattern {}: stages ({}) must be 2-8", name, p.stages);
  DI_CHECK(p.threads >= 32 && p.threads <= 1024 && p.threads % 32 == 0,
           "read pattern {}: threads ({}) must be a multiple of 32 up to 1024", name, p.threads);
  const int64_t tile_units = p.TileBytes() / 16;
  if (p.per_warp) {
    const int warps = p.threads / 32;
    DI_CHECK(p.block_rows % warps == 0 && (tile_units / warps) % 32 == 0,
             "read pattern {}: per warp, each of the {} warps needs an equal share of block_rows ({}) that is a "
             "multiple of 32 16-byte units",
             name, warps, p.block_rows);
  } else {
    DI_CHECK(tile_units % p.threads == 0,
             "read pattern {}: a tile's {} 16-byte units must split evenly over {} threads", name, tile_units,
             p.threads);
  }
  DI_CHECK(p.smem_bytes >= p.stages * p.TileBytes() && p.smem_bytes <= 227 * 1024,
           "read pattern {}: smem_bytes ({}) must hold the {} stages of {} bytes and fit an SM (227 KiB)", name,
           p.smem_bytes, p.stages, p.TileBytes());
  DI_CHECK(p.Items() < (int64_t{1} << 31), "read pattern {}: {} items do not fit a grid", name, p.Items());
}

std::vector<ReadPattern> StandardReadPatterns() {
  // The BF16 head [129280, 4096] as DenseSplitKernel<8, true> reads it at batch 1-8: a block per
  // 128 rows, 64-column (128-byte) chunks, 4 stages of 16 KiB, 256 threads, a block barrier a
  // chunk, DenseSmem<8>'s 80,896 bytes (two blocks an SM).
  ReadPattern head;
  head.name = "head_rows";
  head.mimics = "DenseSplitKernel<8>: the BF16 head [129280, 4096] at batch 1-8";
  head.rows = 129280;
  head.row_bytes = 4096 * 2;
  head.block_rows = 128;
  head.chunk_bytes = 128;
  head.stages = 4;
  head.threads = 256;
  head.smem_bytes = 80896;
  head.walk = ReadWalk::kBlockPerItem;

  ReadPattern head_tiled = head;
  head_tiled.name = "head_tiled";
  head_tiled.mimics = "head_rows on the weight written tile by tile (16 KiB contiguous a chunk)";
  head_tiled.tiled = true;

  ReadPattern head_wide = head;
  head_wide.name = "head_rows_256";
  head_wide.mimics = "head_rows with 256-byte chunks, 3 stages (64 KiB ahead instead of 48)";
  head_wide.chunk_bytes = 256;
  head_wide.stages = 3;
  head_wide.smem_bytes = 3 * 128 * 256 + 1024;

  // FP4 experts of K = 4096 (2,048 bytes a row), 1 GiB of rows, as ExpertsFp4RegistersKernel<8, 3>
  // reads them at decode: items of 64 rows, each of the 4 warps its own 16 rows' 64-byte chunks on a
  // ring 6 chunks ahead with a warp barrier, items b, b + G, ... (each starting the ring empty),
  // 76,032 bytes of shared memory (three blocks an SM).
  ReadPattern experts;
  experts.name = "experts_items";
  experts.mimics = "ExpertsFp4RegistersKernel<8, 3>: FP4 experts (K = 4096) at decode, 1 GiB";
  experts.rows = (int64_t{1} << 30) / 2048;
  experts.row_bytes = 2048;
  experts.block_rows = 64;
  experts.chunk_bytes = 64;
  experts.stages = 7;
  experts.threads = 128;
  experts.smem_bytes = 76032;
  experts.per_warp = true;
  experts.ring_restarts = true;
  experts.walk = ReadWalk::kStrided;

  ReadPattern experts_tiled = experts;
  experts_tiled.name = "experts_items_tiled";
  experts_tiled.mimics = "experts_items on the weight written tile by tile (4 KiB contiguous a chunk)";
  experts_tiled.tiled = true;

  // The same reads with each copy taking 2 or 4 consecutive chunks of its rows (128- or 256-byte
  // pieces of a row; 3 or 1 stages ahead: 6 or 4 of experts_items' chunks). Version 47 ran the kernel
  // so (a ring 5 or 3 chunks ahead) and measured it slower; the patterns stay as its record.
  ReadPattern experts_pairs = experts;
  experts_pairs.name = "experts_items_128";
  experts_pairs.mimics = "experts_items copied 2 chunks at a time (128-byte pieces of a row)";
  experts_pairs.chunk_bytes = 128;
  experts_pairs.stages = 4;

  ReadPattern experts_quads = experts;
  experts_quads.name = "experts_items_256";
  experts_quads.mimics = "experts_items copied 4 chunks at a time (256-byte pieces of a row)";
  experts_quads.chunk_bytes = 256;
  experts_quads.stages = 2;

  ReadPattern runs = experts;
  runs.name = "experts_runs";
  runs.mimics = "version 45a's runs (removed): a block's contiguous items on one ring";
  runs.ring_restarts = false;
  runs.walk = ReadWalk::kRuns;

  ReadPattern runs_tiled = runs;
  runs_tiled.name = "experts_runs_tiled";
  runs_tiled.mimics = "experts_runs on the weight written tile by tile";
  runs_tiled.tiled = true;

  return {head, head_tiled, head_wide, experts, experts_tiled, experts_pairs, experts_quads, runs, runs_tiled};
}

ReadPattern ScaledDown(ReadPattern p, int64_t max_bytes) {
  const int64_t item_bytes = int64_t{p.block_rows} * p.row_bytes;
  const int64_t items = std::max<int64_t>(1, std::min(p.Items(), max_bytes / std::max<int64_t>(item_bytes, 1)));
  p.rows = items * p.block_rows;
  return p;
}

std::vector<int64_t> SmallReadSizes() {
  std::vector<int64_t> sizes;
  for (const int64_t mib : {1, 2, 4, 8, 16, 32, 64, 256}) sizes.push_back(mib << 20);
  return sizes;
}

uint64_t WordSum(const uint8_t* bytes, size_t size) {
  DI_CHECK(size % 4 == 0, "WordSum of {} bytes: not whole 32-bit words", size);
  uint64_t sum = 0;
  for (size_t i = 0; i < size; i += 4) {
    uint32_t word = 0;
    std::memcpy(&word, bytes + i, 4);  // little-endian hosts and GPUs alike
    sum += word;
  }
  return sum;
}

namespace {

const char* WalkName(ReadWalk w) {
  switch (w) {
    case ReadWalk::kBlockPerItem:
      return "block_per_item";
    case ReadWalk::kStrided:
      return "strided";
    case ReadWalk::kRuns:
      return "runs";
  }
  return "?";
}

}  // namespace

nlohmann::json ToJson(const ReadPatternsReport& r) {
  nlohmann::json j;
  j["device"] = r.device;
  j["copy"] = ToJson(r.copy);
  j["plain_read_bytes_per_s"] = r.plain_read_bytes_per_s;
  for (const ReadTiming& t : r.patterns) {
    const ReadPattern& p = t.pattern;
    j["patterns"].push_back({
        {"name", p.name},
        {"mimics", p.mimics},
        {"rows", p.rows},
        {"row_bytes", p.row_bytes},
        {"block_rows", p.block_rows},
        {"chunk_bytes", p.chunk_bytes},
        {"stages", p.stages},
        {"threads", p.threads},
        {"smem_bytes", p.smem_bytes},
        {"tiled", p.tiled},
        {"per_warp", p.per_warp},
        {"ring_restarts", p.ring_restarts},
        {"walk", WalkName(p.walk)},
        {"bytes", p.Bytes()},
        {"grid", t.grid},
        {"blocks_per_sm", t.blocks_per_sm},
        {"seconds", t.seconds},
        {"bytes_per_s", t.bytes_per_s},
        {"of_plain_read", r.plain_read_bytes_per_s > 0 ? t.bytes_per_s / r.plain_read_bytes_per_s : 0.0},
        {"of_copy", r.copy.bytes_per_s > 0 ? t.bytes_per_s / r.copy.bytes_per_s : 0.0},
        {"sums_agree", t.sums_agree},
    });
  }
  for (const SmallReadTiming& t : r.small_reads) {
    j["small_reads"].push_back({{"bytes", t.bytes}, {"seconds", t.seconds}, {"bytes_per_s", t.bytes_per_s}});
  }
  return j;
}

}  // namespace deepinfer::bench
