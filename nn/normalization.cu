// Device kernels of layer norm: one thread per row for y and dx, running the
// CPU's scalar math (normalization_math.h); dw and db, sums down the columns,
// a block of threads per 32 columns (kernel::add_lanes).
#include "autograd/ops/kernel.h"
#include "nn/device_kernels.h"
#include "nn/normalization_math.h"

namespace qkv::nn::device {

namespace {

template <class T> const T* maybe(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }
template <class T> T* maybe_out(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }

// dw[c] = Σ_r g[r, c]·(x[r, c] − μ_r)·rstd_r and db[c] = Σ_r g[r, c] for the block's `width` columns.
template <class T> struct ParamTiles {
  static constexpr int kThreads = kernel::kReduceThreads;
  using Shared = kernel::LaneSums<2>;
  const T* x;
  const double* stats;
  const T* g;
  T* gw;  // either may be null
  T* gb;
  int64_t rows, C;
  int width;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const int64_t c0 = block * width;
    threads.each([&](int t) {
      const int64_t c = c0 + t % width;
      double sw = 0, sb = 0;
      if (c < C)
        for (int64_t r = t / width; r < rows; r += kThreads / width) {
          const double gi = g[r * C + c];
          sw += gi * (x[r * C + c] - stats[2 * r]) * stats[2 * r + 1];
          sb += gi;
        }
      sh.v[0][t] = sw, sh.v[1][t] = sb;
    });
    kernel::add_lanes(sh, width, threads);
    threads.each([&](int t) {
      if (t >= width || c0 + t >= C) return;
      if (gw) gw[c0 + t] = static_cast<T>(sh.v[0][t]);
      if (gb) gb[c0 + t] = static_cast<T>(sh.v[1][t]);
    });
  }
};

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& stats) {
  int64_t C = x.size(-1);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("layer_norm", x.device(), x.numel() / C,
                   math::LayerNormRow<T>{x.device_data<T>(), maybe<T>(weight), maybe<T>(bias), y.device_data<T>(),
                                         stats.device_data<double>(), C, eps});
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g, const Tensor& gx,
                         const Tensor& gw, const Tensor& gb) {
  int64_t C = x.size(-1), rows = x.numel() / C;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("layer_norm_backward", x.device(), rows,
                   math::LayerNormBackwardRow<T>{x.device_data<T>(), maybe<T>(weight), stats.device_data<double>(),
                                                 g.device_data<T>(), gx.device_data<T>(), C});
    if (gw.defined() || gb.defined()) {
      const int width = kernel::reduce_width(C);
      kernel::launch_blocks("layer_norm_params", x.device(), (C + width - 1) / width,
                            ParamTiles<T>{x.device_data<T>(), stats.device_data<double>(), g.device_data<T>(),
                                          maybe_out<T>(gw), maybe_out<T>(gb), rows, C, width});
    }
  });
}

}  // namespace qkv::nn::device
