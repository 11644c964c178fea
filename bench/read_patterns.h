// How fast the decode kernels' weight reads can go, apart from their arithmetic: each pattern
// streams a weight-sized buffer the way one of Linear's decode kernels walks its weight (blocks of
// rows, each row read in chunks of a few dozen bytes through a cp.async ring in shared memory, the
// kernel's occupancy), and does nothing with the bytes but sum them. Beside them in the same run, a
// plain read of the same bytes and a device-to-device copy (the decode floor's bandwidth).
//
// The question it answers (docs/performance.md, version 46): whether the weights' row-major
// layout, which a block reads as many short pieces 2-8 KiB apart, costs DRAM bandwidth that a
// layout written at load (each block's chunk contiguous: `tiled`) would not.
//
// A pattern's buffer is `rows` rows of `row_bytes` bytes. Block work unit ("item"): `block_rows`
// consecutive rows, over all of a row in chunks of `chunk_bytes` (row_bytes / chunk_bytes chunks).
// Chunk c of item i is the tile rows [i·block_rows, (i+1)·block_rows) × bytes [c·chunk_bytes,
// (c+1)·chunk_bytes); row-major, its row r lies at (i·block_rows + r)·row_bytes + c·chunk_bytes;
// tiled, the whole tile lies at (i·chunks + c)·tile_bytes, row r at r·chunk_bytes within it (the
// same bytes in another order: the sums agree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/ceilings.h"

namespace deepinfer::bench {

// How a grid's blocks take the items.
enum class ReadWalk {
  kBlockPerItem,  // grid = items, block b reads item b (DenseSplitKernel)
  kStrided,       // grid = resident blocks G, block b reads items b, b + G, ... (the item kernels)
  kRuns,          // grid = resident blocks G, block b reads a contiguous range of items (the runs)
};

struct ReadPattern {
  std::string name;
  std::string mimics;      // which kernel's reads, in words
  int64_t rows = 0;        // weight rows; a multiple of block_rows
  int64_t row_bytes = 0;   // bytes of a row; a multiple of chunk_bytes
  int block_rows = 0;      // rows of an item
  int chunk_bytes = 0;     // bytes of each row a chunk holds; a multiple of 16
  int stages = 0;          // the ring's chunks (stages − 1 in flight ahead of the one waited on); 2-8
  int threads = 0;         // a block's threads; a multiple of 32, at most 1024
  int smem_bytes = 0;      // dynamic shared memory a block asks for (>= stages · tile bytes): the
                           // mimicked kernel's, so that as many blocks share an SM
  bool tiled = false;      // each (item, chunk) tile contiguous instead of row-major
  bool per_warp = false;   // each warp copies, waits for and reads its own block_rows / warps rows
                           // with a warp barrier (the register-fed experts); else a block barrier
  bool ring_restarts = false;  // the ring drains at each item's end (items start it empty); else it
                               // runs on across a block's items
  ReadWalk walk = ReadWalk::kBlockPerItem;

  int64_t Bytes() const { return rows * row_bytes; }
  int64_t Items() const { return rows / block_rows; }
  int64_t Chunks() const { return row_bytes / chunk_bytes; }
  int64_t TileBytes() const { return int64_t{block_rows} * chunk_bytes; }
};

// Throws deepinfer::Error naming the first rule above that `p` breaks.
void ValidateReadPattern(const ReadPattern& p);

// The patterns `deepinfer bench read-patterns` times, at the Flash shapes of the kernels they
// mimic (BF16 head [129280, 4096] at 8 tokens; FP4 experts of K = 4096, 1 GiB of rows), each
// row-major as the kernels read them now and tiled.
std::vector<ReadPattern> StandardReadPatterns();

// `p` with `rows` cut to at most max_bytes of rows (a multiple of block_rows, at least one item).
ReadPattern ScaledDown(ReadPattern p, int64_t max_bytes);

// Σ of the little-endian 32-bit words of `bytes` (a multiple of 4 long) modulo 2^64: what every
// pattern's kernel and the plain read return for the same bytes.
uint64_t WordSum(const uint8_t* bytes, size_t size);

struct ReadTiming {
  ReadPattern pattern;
  int64_t grid = 0;           // blocks launched
  int blocks_per_sm = 0;      // resident blocks an SM holds (the occupancy calculator's)
  double seconds = 0;         // per pass over the buffer: mean over the timed passes
  double bytes_per_s = 0;     // Bytes() / seconds (bytes read)
  bool sums_agree = false;    // the first pass's WordSum equals the plain read's of the same bytes
};

// The plain read of a small weight's bytes, launch after launch on one stream, each launch at
// another offset of the buffer (a cycle far larger than L2, so every read comes from DRAM): the
// time a small weight costs a kernel that only reads it, launch and ramp included.
struct SmallReadTiming {
  int64_t bytes = 0;
  double seconds = 0;      // per launch: mean over the timed launches
  double bytes_per_s = 0;  // bytes / seconds
};

struct ReadPatternsReport {
  std::string device;
  CopyTiming copy;            // TimeDeviceCopy of 1 GiB: bytes read plus written per second
  double plain_read_bytes_per_s = 0;  // a grid-stride 16-byte read of the largest pattern's bytes
  std::vector<ReadTiming> patterns;
  std::vector<SmallReadTiming> small_reads;  // SmallReadSizes(), in order
};

// The small reads' sizes: 1, 2, 4, 8, 16, 32, 64 and 256 MiB (the decode weights of one launch run
// from 2 MiB, wkv, to 32 MiB, wq_b and wo_b; an expert's w13 is 8 MiB at FP4).
std::vector<int64_t> SmallReadSizes();

// Times `patterns` (each validated first) over one buffer of random bytes, `iterations` passes
// each after one checked pass. Throws deepinfer::Error on CUDA errors and without the CUDA build.
ReadPatternsReport TimeReadPatterns(int device_index, const std::vector<ReadPattern>& patterns, int iterations);

// Tests: the WordSum that one pass of `p`'s kernel (plain: the grid-stride read instead) returns
// over `bytes` (Bytes() of them for a pattern; any multiple of 16 for the plain read), uploaded;
// max_blocks > 0 caps the pattern's grid (so that strided walks and runs cross many items).
uint64_t ReadPatternSumForTesting(int device_index, const ReadPattern& p, const std::vector<uint8_t>& bytes,
                                  int64_t max_blocks = 0);
uint64_t PlainReadSumForTesting(int device_index, const std::vector<uint8_t>& bytes);

nlohmann::json ToJson(const ReadPatternsReport& r);

}  // namespace deepinfer::bench
