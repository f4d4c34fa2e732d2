// Threads: one setting for qkv's OpenMP loops and OpenBLAS.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <source_location>
#include <vector>

#include <omp.h>

#include "autograd/profile.h"

namespace qkv {

/// Sets the thread count of qkv's loops and of OpenBLAS (which shares the
/// OpenMP pool). n <= 0 restores the default (all cores / OMP_NUM_THREADS).
/// The count set is what the OpenMP runtime will really give a parallel
/// region: at most its thread limit (OMP_THREAD_LIMIT), with its dynamic
/// adjustment (OMP_DYNAMIC) turned off. OpenBLAS waits for every thread it
/// was told of, and spun forever when the runtime gave fewer. Returns it.
int set_num_threads(int n);
int get_num_threads();
/// The most threads the OpenMP runtime gives one parallel region (OMP_THREAD_LIMIT; very large where unset).
int thread_limit();

/// How many of the default threads have a core to themselves right now: the
/// idle share of every core over `sample_ms` (from /proc/stat), rounded,
/// at least 1. On a busy machine fewer threads beat more: a thread that
/// shares its core with another process holds every parallel loop up.
/// Returns the default count where /proc/stat cannot be read.
int idle_threads(int sample_ms = 60);

/// Loops below this many element-operations run on one thread: forking the
/// pool costs more than it saves on small tensors.
constexpr int64_t kParallelGrain = 32768;

/// Calls fn(begin, end) on disjoint chunks of [0, n) covering it, in parallel
/// when n * cost_per_item reaches kParallelGrain. Each item is handled by one
/// thread, so results do not depend on the thread count. `where` names the
/// loop in a region profile (autograd/profile.h).
template <class Fn> void parallel_for(int64_t n, int64_t cost_per_item, Fn&& fn,
                                      const std::source_location& where = std::source_location::current()) {
  if (n <= 0) return;
  int threads = omp_get_max_threads();
  bool serial = threads <= 1 || n < 2 || n * cost_per_item < kParallelGrain || omp_in_parallel();
  profile::Scope region(where, n, !serial);
  if (serial) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int64_t count = omp_get_num_threads();
    int64_t id = omp_get_thread_num();
    int64_t begin = n * id / count, end = n * (id + 1) / count;
    if (begin < end) fn(begin, end);
  }
}

/// Calls fn(block, at, length) over every piece of `blocks` blocks of `bytes`
/// bytes each, a piece being up to kBytePiece bytes from offset `at` of its
/// block; threads share the pieces. For copies and fills (memcpy, memset),
/// whose bytes are the same however they are split: one large block is
/// shared by the threads too, not copied on one.
inline constexpr int64_t kBytePiece = 16384;
template <class Fn> void parallel_for_pieces(int64_t blocks, int64_t bytes, Fn&& fn,
                                             const std::source_location& where = std::source_location::current()) {
  if (blocks <= 0 || bytes <= 0) return;  // nothing to copy: no call with an empty (maybe null) block
  const int64_t pieces = (bytes + kBytePiece - 1) / kBytePiece;
  const int64_t floats = std::min(bytes, kBytePiece) / 4;  // a piece's cost, in float-sized items
  parallel_for(
      blocks * pieces, floats,
      [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          int64_t at = item % pieces * kBytePiece;
          fn(item / pieces, at, std::min(kBytePiece, bytes - at));
        }
      },
      where);
}

/// One of several loops for parallel_for_all: fn(begin, end) handles items
/// [begin, end) of [0, n), each item independently of the others.
struct ItemLoop {
  int64_t n = 0;
  std::function<void(int64_t, int64_t)> fn;
};

/// Runs every loop as one parallel region: each is cut into chunks of
/// kLoopChunk items (fixed by n alone), and threads share all the chunks.
/// For many small loops (an optimizer's per-parameter updates): one fork
/// instead of one per loop, and the small ones no longer run alone. Results
/// do not depend on the thread count, since items are independent.
inline constexpr int64_t kLoopChunk = 16384;
void parallel_for_all(const std::vector<ItemLoop>& loops, int64_t cost_per_item,
                      const std::source_location& where = std::source_location::current());

}  // namespace qkv
