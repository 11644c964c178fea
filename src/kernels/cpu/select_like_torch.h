// The candidate selection the reference's torch.topk makes on the CPU, written out so that the GPU
// can make the identical choice among tied scores (header-only, host and device).
//
// torch's CPU top-k of k out of n runs, on (score, index) pairs in index order compared by score
// alone, a partial sort when k·64 <= n and otherwise an nth_element; which of several equal
// scores end up in the first k is decided by those algorithms' exact sequence of moves. The
// functions below perform the same moves as GCC's libstdc++ implementations of partial_sort's
// heap selection and of nth_element's introselect (median-of-three pivot, unguarded partition,
// heap-select fallback at the depth limit, insertion sort of the last ≤ 3 elements); a test checks
// them against std::partial_sort / std::nth_element on tie-heavy inputs. Only the set of the
// first k matters to the callers (cpu::IndexerTopK, and the GPU indexer's tie resolution), so
// the final sort of partial_sort is left out.
#pragma once

#include <cstdint>

#include "kernels/cpu/host_device.h"

namespace deepinfer::cpu {

struct ScoredCandidate {
  float score;
  int32_t index;
};

namespace select_like_torch {

// "a ranks before b": NaN first, then larger scores; equal scores are unordered.
DI_HOST_DEVICE inline bool Before(const ScoredCandidate& a, const ScoredCandidate& b) {
  const bool a_nan = a.score != a.score, b_nan = b.score != b.score;
  return (a_nan && !b_nan) || a.score > b.score;
}

DI_HOST_DEVICE inline void Swap(ScoredCandidate& a, ScoredCandidate& b) {
  const ScoredCandidate t = a;
  a = b;
  b = t;
}

DI_HOST_DEVICE inline void PushHeap(ScoredCandidate* first, int64_t hole, int64_t top, ScoredCandidate value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && Before(first[parent], value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

DI_HOST_DEVICE inline void AdjustHeap(ScoredCandidate* first, int64_t hole, int64_t len, ScoredCandidate value) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (Before(first[child], first[child - 1])) --child;
    first[hole] = first[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    first[hole] = first[child - 1];
    hole = child - 1;
  }
  PushHeap(first, hole, top, value);
}

DI_HOST_DEVICE inline void MakeHeap(ScoredCandidate* first, int64_t len) {
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; --parent) {
    AdjustHeap(first, parent, len, first[parent]);
    if (parent == 0) return;
  }
}

// Leaves in [0, middle) the elements partial_sort would (in heap order).
DI_HOST_DEVICE inline void HeapSelect(ScoredCandidate* first, int64_t middle, int64_t last) {
  MakeHeap(first, middle);
  for (int64_t i = middle; i < last; ++i) {
    if (Before(first[i], first[0])) {
      const ScoredCandidate value = first[i];
      first[i] = first[0];
      AdjustHeap(first, 0, middle, value);
    }
  }
}

DI_HOST_DEVICE inline void MoveMedianToFirst(ScoredCandidate* result, ScoredCandidate* a, ScoredCandidate* b,
                                             ScoredCandidate* c) {
  if (Before(*a, *b)) {
    if (Before(*b, *c)) Swap(*result, *b);
    else if (Before(*a, *c)) Swap(*result, *c);
    else Swap(*result, *a);
  } else if (Before(*a, *c)) {
    Swap(*result, *a);
  } else if (Before(*b, *c)) {
    Swap(*result, *c);
  } else {
    Swap(*result, *b);
  }
}

DI_HOST_DEVICE inline ScoredCandidate* UnguardedPartition(ScoredCandidate* first, ScoredCandidate* last,
                                                          const ScoredCandidate* pivot) {
  for (;;) {
    while (Before(*first, *pivot)) ++first;
    --last;
    while (Before(*pivot, *last)) --last;
    if (!(first < last)) return first;
    Swap(*first, *last);
    ++first;
  }
}

DI_HOST_DEVICE inline void InsertionSort(ScoredCandidate* first, ScoredCandidate* last) {
  if (first == last) return;
  for (ScoredCandidate* i = first + 1; i != last; ++i) {
    const ScoredCandidate value = *i;
    if (Before(value, *first)) {
      for (ScoredCandidate* p = i; p != first; --p) *p = *(p - 1);
      *first = value;
    } else {
      ScoredCandidate* hole = i;
      ScoredCandidate* prev = i - 1;
      while (Before(value, *prev)) {
        *hole = *prev;
        hole = prev;
        --prev;
      }
      *hole = value;
    }
  }
}

DI_HOST_DEVICE inline int FloorLog2(int64_t n) {
  int r = 0;
  while (n > 1) n >>= 1, ++r;
  return r;
}

// Leaves in [0, nth] the elements nth_element would put there.
DI_HOST_DEVICE inline void NthElement(ScoredCandidate* first, ScoredCandidate* nth, ScoredCandidate* last) {
  if (first == last || nth == last) return;
  int depth = 2 * FloorLog2(last - first);
  while (last - first > 3) {
    if (depth == 0) {
      HeapSelect(first, nth - first + 1, last - first);
      Swap(*first, *nth);
      return;
    }
    --depth;
    ScoredCandidate* mid = first + (last - first) / 2;
    MoveMedianToFirst(first, first + 1, mid, last - 1);
    ScoredCandidate* cut = UnguardedPartition(first + 1, last, first);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  InsertionSort(first, last);
}

}  // namespace select_like_torch

// Reorders candidates[0, n) so that its first k = min(top_k, n) elements are the ones torch's
// CPU top-k keeps; returns k.
DI_HOST_DEVICE inline int64_t SelectLikeTorch(ScoredCandidate* candidates, int64_t n, int64_t top_k) {
  const int64_t k = top_k < n ? top_k : n;
  if (k <= 0) return 0;
  if (k * 64 <= n) {
    select_like_torch::HeapSelect(candidates, k, n);
  } else {
    select_like_torch::NthElement(candidates, candidates + k - 1, candidates + n);
  }
  return k;
}

}  // namespace deepinfer::cpu
