// Internal: softmax's and log-softmax's row math, written once for the CPU's
// scalar loops (softmax.cpp, float64 and strided rows) and the device kernels
// of strided rows (softmax.cu, which splits contiguous rows among lanes). Each struct computes one row: item i of x
// viewed as [outer, size, inner]. The rules are torch's, except a fully masked row: a NaN propagates, a row of -inf
// gives zeros (-inf for log-softmax), sums run in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "autograd/ops/kernel.h"

namespace qkv::math {

// Row `item` of x viewed as [outer, size, inner]: its first element; its stride is `inner`.
struct RowWalk {
  int64_t size, inner;
  QKV_HD int64_t start(int64_t item) const { return item / inner * size * inner + item % inner; }
};

// y = softmax(x) or log_softmax(x) along the row
template <class T, bool Log> struct SoftmaxRow {
  const T* x;
  T* y;
  RowWalk rows;
  QKV_HD void operator()(int64_t item) const {
    const T* in = x + rows.start(item);
    T* out = y + rows.start(item);
    const int64_t n = rows.size, s = rows.inner;
    const T kMinusInf = -std::numeric_limits<T>::infinity();
    T top = kMinusInf;
    for (int64_t j = 0; j < n; ++j)  // a NaN becomes the max, so it propagates (as in torch)
      if (in[j * s] != in[j * s] || in[j * s] > top) top = in[j * s];
    if (top == kMinusInf) {  // fully masked row
      for (int64_t j = 0; j < n; ++j) out[j * s] = Log ? top : T(0);
      return;
    }
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      T e = std::exp(in[j * s] - top);
      total += e;
      if (!Log) out[j * s] = e;
    }
    if (Log) {  // (x − max) − log Σ, as torch: x − (max + log Σ) rounds max + log Σ at the logits' scale
      T log_total = static_cast<T>(std::log(total));
      for (int64_t j = 0; j < n; ++j) out[j * s] = (in[j * s] - top) - log_total;
    } else {
      T scale = static_cast<T>(1.0 / total);
      for (int64_t j = 0; j < n; ++j) out[j * s] *= scale;
    }
  }
};

// softmax: gx = y ⊙ (g - Σ g⊙y); log_softmax: gx = g - exp(y) Σ g. The sum
// stays in double: g and Σ g⊙y nearly cancel where y ≈ 1.
template <class T, bool Log> struct SoftmaxBackwardRow {
  const T* y;
  const T* g;
  T* gx;
  RowWalk rows;
  QKV_HD void operator()(int64_t item) const {
    const int64_t start = rows.start(item), n = rows.size, s = rows.inner;
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += Log ? g[start + j * s] : g[start + j * s] * y[start + j * s];
    for (int64_t j = 0; j < n; ++j) {
      int64_t at = start + j * s;
      gx[at] = Log ? g[at] - std::exp(y[at]) * static_cast<T>(total) : y[at] * static_cast<T>(g[at] - total);
    }
  }
};

}  // namespace qkv::math
