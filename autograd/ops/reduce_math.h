// Internal: the max and masked-mean reductions' scalar math, written once
// for the CPU loops (reduce.cpp) and the device kernels (reduce.cu). x is
// viewed as [outer, reduced, inner] (max) or [B, steps, inner] (masked mean);
// each struct computes one output element.
#pragma once

#include <cstdint>

#include "autograd/ops/kernel.h"

namespace qkv::math {

// out[o, i] = max_r x[o, r, i] and its first arg-max; a NaN wins and stops the walk.
template <class T> struct MaxColumn {
  const T* x;
  T* out;
  int64_t* argmax;
  int64_t reduced, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t o = item / inner, i = item % inner;
    const T* col = x + o * reduced * inner + i;
    T best = col[0];
    int64_t arg = 0;
    for (int64_t r = 1; r < reduced && best == best; ++r) {
      T v = col[r * inner];
      if (v > best || v != v) best = v, arg = r;
    }
    out[item] = best;
    argmax[item] = arg;
  }
};

// gx[o, argmax[o, i], i] = g[o, i] (gx starts at zero)
template <class T> struct MaxBackwardItem {
  const T* g;
  const int64_t* argmax;
  T* gx;
  int64_t reduced, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t o = item / inner, i = item % inner;
    gx[(o * reduced + argmax[item]) * inner + i] = g[item];
  }
};

// out[b, k] = Σ_{t < n[b]} x[b, t, k] / n[b]
template <class T> struct MaskedMeanItem {
  const T* x;
  const int64_t* lengths;
  T* out;
  int64_t steps, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t b = item / inner, k = item % inner;
    T acc = 0;
    for (int64_t t = 0; t < lengths[b]; ++t) acc += x[(b * steps + t) * inner + k];
    out[item] = acc / static_cast<T>(lengths[b]);
  }
};

// gx[b, t, k] = g[b, k] / n[b] for t < n[b], else 0
template <class T> struct MaskedMeanBackwardItem {
  const T* g;
  const int64_t* lengths;
  T* gx;
  int64_t steps, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t k = item % inner, row = item / inner, t = row % steps, b = row / steps;
    gx[item] = t < lengths[b] ? g[b * inner + k] / static_cast<T>(lengths[b]) : T(0);
  }
};

}  // namespace qkv::math
