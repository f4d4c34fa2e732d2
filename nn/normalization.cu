// Device kernels of layer norm, in the CPU's float64 scalar arithmetic: one
// thread per row for y and dx, one per column for dw and db (walking the rows
// in order, so sums do not depend on the launch).
#include <cmath>

#include "autograd/ops/kernel.h"
#include "nn/device_kernels.h"

namespace qkv::nn::device {

namespace {

// μ, r = 1/√(σ² + eps) of row `row`; y = (x - μ)·r·w + b
template <class T> struct LayerNormKernel {
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
    for (int64_t c = 0; c < C; ++c) {
      T v = static_cast<T>((in[c] - mu) * rstd);
      y[row * C + c] = (w ? v * w[c] : v) + (b ? b[c] : T(0));
    }
  }
};

// with x̂ = (x - μ)·r and d = g ⊙ w: dx = r · (d - mean(d) - x̂ · mean(d ⊙ x̂))
template <class T> struct LayerNormBackwardKernel {
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
      double d = gr[c] * (w ? w[c] : T(1));
      mean_d += d;
      mean_dx += d * (xr[c] - mu) * rstd;
    }
    mean_d /= C;
    mean_dx /= C;
    for (int64_t c = 0; c < C; ++c) {
      double d = gr[c] * (w ? w[c] : T(1));
      double xhat = (xr[c] - mu) * rstd;
      gx[row * C + c] = static_cast<T>(rstd * (d - mean_d - xhat * mean_dx));
    }
  }
};

// dw[c] = Σ_rows g ⊙ x̂, db[c] = Σ_rows g
template <class T> struct LayerNormParamsKernel {
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

template <class T> const T* maybe(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }
template <class T> T* maybe_out(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& stats) {
  int64_t C = x.size(-1);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("layer_norm", x.device(), x.numel() / C,
                   LayerNormKernel<T>{x.device_data<T>(), maybe<T>(weight), maybe<T>(bias), y.device_data<T>(),
                                      stats.device_data<double>(), C, eps});
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g, const Tensor& gx,
                         const Tensor& gw, const Tensor& gb) {
  int64_t C = x.size(-1), rows = x.numel() / C;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("layer_norm_backward", x.device(), rows,
                   LayerNormBackwardKernel<T>{x.device_data<T>(), maybe<T>(weight), stats.device_data<double>(),
                                              g.device_data<T>(), gx.device_data<T>(), C});
    if (gw.defined() || gb.defined())
      kernel::launch("layer_norm_params", x.device(), C,
                     LayerNormParamsKernel<T>{x.device_data<T>(), stats.device_data<double>(), g.device_data<T>(),
                                              maybe_out<T>(gw), maybe_out<T>(gb), rows, C});
  });
}

}  // namespace qkv::nn::device
