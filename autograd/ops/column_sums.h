// Column sums of a row-major matrix that do not depend on the thread count.
// Internal to the library: a linear layer's bias gradient (autograd/ops/
// matmul.cpp) and LayerNorm's block partials (nn/normalization.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "autograd/parallel.h"
#include "autograd/simd.h"

namespace qkv {

/// out[c] = Σ_r g[r·ld + c] for c < cols: threads split the columns and each
/// adds the rows in order, so the sums do not depend on the thread count.
/// Each thread's columns are one contiguous run of whole chunks (a 1-thread
/// call adds whole rows); a chunk is one cache line of floats, so a product of
/// C columns can use C/16 threads (64-column chunks capped a width-128 model's
/// at 2).
template <class T> void column_sums(const T* g, int64_t rows, int64_t cols, int64_t ld, T* out) {
  constexpr int64_t kCols = 16;
  parallel_for((cols + kCols - 1) / kCols, 2 * kCols * rows, [&](int64_t begin, int64_t end) {
    int64_t c0 = begin * kCols, c1 = std::min(cols, end * kCols);
    std::fill(out + c0, out + c1, T(0));
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<T, float>) {
        simd::add_inplace(out + c0, g + r * ld + c0, c1 - c0);
      } else {
        for (int64_t c = c0; c < c1; ++c) out[c] += g[r * ld + c];
      }
    }
  });
}

}  // namespace qkv
