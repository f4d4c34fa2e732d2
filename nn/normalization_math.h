// Internal: layer norm's scalar math for the CPU's float64 loops
// (normalization.cpp): a row of y and of dx, and a column of dw and db
// (walking the rows in order, so the sums do not depend on threads). The
// device kernels (normalization.cu) split the same sums among a block's
// threads. Moments and dx in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/ops/kernel.h"

namespace qkv::nn::math {

// One element's math, which the CPU's rows and the device's lanes share.
/// y = x̂·w + b at column c, x̂ = (x − μ)·r (w, b null without affine parameters).
template <class T> QKV_HD T layer_norm_y(T x, double mu, double rstd, const T* w, const T* b, int64_t c) {
  const T v = static_cast<T>((x - mu) * rstd);
  return (w ? v * w[c] : v) + (b ? b[c] : T(0));
}
/// d = g·w at column c (the product in T).
template <class T> QKV_HD double layer_norm_d(T g, const T* w, int64_t c) { return g * (w ? w[c] : T(1)); }
/// dx = r·(d − mean(d) − x̂·mean(d ⊙ x̂)).
QKV_HD inline double layer_norm_dx(double d, double xhat, double rstd, double mean_d, double mean_dx) {
  return rstd * (d - mean_d - xhat * mean_dx);
}

// μ, r = 1/√(σ² + eps) of row `row`; y = (x - μ)·r·w + b
template <class T> struct LayerNormRow {
  const T* x;
  const T* w;  // null without affine parameters
  const T* b;
  T* y;
  double* stats;
  int64_t C;
  double eps;
  QKV_HD void operator()(int64_t row) const {
    const T* in = x + row * C;
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += in[c];
    mu /= C;
    for (int64_t c = 0; c < C; ++c) var += (in[c] - mu) * (in[c] - mu);
    double rstd = 1.0 / std::sqrt(var / C + eps);
    stats[2 * row] = mu;
    stats[2 * row + 1] = rstd;
    for (int64_t c = 0; c < C; ++c) y[row * C + c] = layer_norm_y(in[c], mu, rstd, w, b, c);
  }
};

// with x̂ = (x - μ)·r and d = g ⊙ w: dx = r · (d - mean(d) - x̂ · mean(d ⊙ x̂))
template <class T> struct LayerNormBackwardRow {
  const T* x;
  const T* w;
  const double* stats;
  const T* g;
  T* gx;
  int64_t C;
  QKV_HD void operator()(int64_t row) const {
    double mu = stats[2 * row], rstd = stats[2 * row + 1], mean_d = 0, mean_dx = 0;
    const T *xr = x + row * C, *gr = g + row * C;
    for (int64_t c = 0; c < C; ++c) {
      double d = layer_norm_d(gr[c], w, c);
      mean_d += d;
      mean_dx += d * (xr[c] - mu) * rstd;
    }
    mean_d /= C;
    mean_dx /= C;
    for (int64_t c = 0; c < C; ++c)
      gx[row * C + c] =
          static_cast<T>(layer_norm_dx(layer_norm_d(gr[c], w, c), (xr[c] - mu) * rstd, rstd, mean_d, mean_dx));
  }
};

// dw[c] = Σ_rows g ⊙ x̂, db[c] = Σ_rows g
template <class T> struct LayerNormParamsColumn {
  const T* x;
  const double* stats;
  const T* g;
  T* gw;  // either may be null
  T* gb;
  int64_t rows, C;
  QKV_HD void operator()(int64_t c) const {
    T sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      T mu = static_cast<T>(stats[2 * r]), rstd = static_cast<T>(stats[2 * r + 1]);
      sw += g[r * C + c] * (x[r * C + c] - mu) * rstd;
      sb += g[r * C + c];
    }
    if (gw) gw[c] = sw;
    if (gb) gb[c] = sb;
  }
};

}  // namespace qkv::nn::math
