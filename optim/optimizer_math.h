// Internal: the optimizers' update math and clip_grad_norm's pieces, written
// once for the CPU's scalar loops (optimizer.cpp; its float32 Adam runs the
// same formulas in vector lanes) and the device kernels (optimizer.cu). Each
// struct updates one element, or sums one block. Arithmetic in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/ops/kernel.h"

namespace qkv::optim::math {

/// One SGD step's settings.
struct SGDStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first;  // first: the momentum buffer starts as the step
};
/// One Adam or AdamW step's settings (AdamW: l2 = 0 and shrink = 1 − lr·wd).
struct AdamStep {
  double lr, beta1, beta2, eps, l2, shrink, bias_correction1, bias_correction2;
};

// d = g + wd·p;  b = first ? d : μ·b + (1 − τ)·d;  d = nesterov ? d + μ·b : b;  p -= lr·d
template <class T> struct SGDItem {
  SGDStep s;
  T* p;
  const T* g;
  T* b;  // null without momentum
  QKV_HD void operator()(int64_t i) const {
    double d = g[i] + s.weight_decay * p[i];
    if (b) {
      b[i] = static_cast<T>(s.first ? d : s.momentum * b[i] + (1 - s.dampening) * d);
      d = s.nesterov ? d + s.momentum * b[i] : b[i];
    }
    p[i] = static_cast<T>(p[i] - s.lr * d);
  }
};

// d = g + l2·p;  m = β1·m + (1 − β1)·d;  v = β2·v + (1 − β2)·d²;
// p = p·shrink − lr·(m/bc1) / (√(v/bc2) + ε)
template <class T> struct AdamItem {
  AdamStep s;
  T* p;
  const T* g;
  T* m;
  T* v;
  QKV_HD void operator()(int64_t i) const {
    double d = g[i] + s.l2 * p[i];
    m[i] = static_cast<T>(s.beta1 * m[i] + (1 - s.beta1) * d);
    v[i] = static_cast<T>(s.beta2 * v[i] + (1 - s.beta2) * d * d);
    double step = (m[i] / s.bias_correction1) / (std::sqrt(v[i] / s.bias_correction2) + s.eps);
    p[i] = static_cast<T>(p[i] * s.shrink - s.lr * step);
  }
};

// partial[k] = Σ g² over block k, in order
template <class T> struct SquaresBlock {
  const T* g;
  double* partial;
  int64_t n, block;
  QKV_HD void operator()(int64_t k) const {
    double s = 0;
    for (int64_t i = k * block, end = i + block < n ? i + block : n; i < end; ++i)
      s += static_cast<double>(g[i]) * g[i];
    partial[k] = s;
  }
};

template <class T> struct ScaleItem {
  T* g;
  double factor;
  QKV_HD void operator()(int64_t i) const { g[i] = static_cast<T>(g[i] * factor); }
};

}  // namespace qkv::optim::math
