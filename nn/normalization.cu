// Device kernels of layer norm, the math of normalization_math.h: y and dx
// a block of threads per 8 rows, 32 lanes a row (fewer lanes and more rows
// for rows under 32 values; kernel::add_row_lanes); dw and db, sums down the
// columns, a block per 32 columns (add_lanes). Moments and sums in double.
#include <cmath>

#include "autograd/ops/kernel.h"
#include "nn/device_kernels.h"
#include "nn/normalization_math.h"

namespace qkv::nn::device {

namespace {

template <class T> const T* maybe(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }
template <class T> T* maybe_out(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }

// μ, r = 1/√(σ² + eps) of each row; y = (x - μ)·r·w + b
template <class T> struct ForwardRows {
  static constexpr int kThreads = kernel::kReduceThreads;
  using Shared = kernel::LaneSums<2>;
  const T* x;
  const T* w;  // null without affine parameters
  const T* b;
  T* y;
  double* stats;
  int64_t rows, C;
  double eps;
  int lanes;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const kernel::RowLanes pos(block, lanes);
    threads.each([&](int t) {
      double s = 0;
      if (pos.row(t) < rows)
        for (int64_t c = pos.lane(t); c < C; c += lanes) s += x[pos.row(t) * C + c];
      sh.v[0][t] = s;
    });
    kernel::add_row_lanes(sh, threads, lanes, 0, 1);
    threads.each([&](int t) {  // Σ (x − μ)², μ from lane 0's total
      const double mu = sh.v[0][pos.head(t)] / C;
      double s = 0;
      if (pos.row(t) < rows)
        for (int64_t c = pos.lane(t); c < C; c += lanes) {
          const double e = x[pos.row(t) * C + c] - mu;
          s += e * e;
        }
      sh.v[1][t] = s;
    });
    kernel::add_row_lanes(sh, threads, lanes, 1, 2);
    threads.each([&](int t) {
      const int64_t r = pos.row(t);
      if (r >= rows) return;
      const int head = pos.head(t);
      const double mu = sh.v[0][head] / C, rstd = 1.0 / std::sqrt(sh.v[1][head] / C + eps);
      if (t == head) stats[2 * r] = mu, stats[2 * r + 1] = rstd;
      for (int64_t c = pos.lane(t); c < C; c += lanes)
        y[r * C + c] = math::layer_norm_y(x[r * C + c], mu, rstd, w, b, c);
    });
  }
};

// with x̂ = (x - μ)·r and d = g ⊙ w: dx = r · (d - mean(d) - x̂ · mean(d ⊙ x̂))
template <class T> struct BackwardRows {
  static constexpr int kThreads = kernel::kReduceThreads;
  using Shared = kernel::LaneSums<2>;
  const T* x;
  const T* w;
  const double* stats;
  const T* g;
  T* gx;
  int64_t rows, C;
  int lanes;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const kernel::RowLanes pos(block, lanes);
    threads.each([&](int t) {
      double sd = 0, sdx = 0;
      const int64_t r = pos.row(t);
      if (r < rows)
        for (int64_t c = pos.lane(t); c < C; c += lanes) {
          const double d = math::layer_norm_d(g[r * C + c], w, c);
          sd += d;
          sdx += d * (x[r * C + c] - stats[2 * r]) * stats[2 * r + 1];
        }
      sh.v[0][t] = sd, sh.v[1][t] = sdx;
    });
    kernel::add_row_lanes(sh, threads, lanes);
    threads.each([&](int t) {
      const int64_t r = pos.row(t);
      if (r >= rows) return;
      const int head = pos.head(t);
      const double mu = stats[2 * r], rstd = stats[2 * r + 1], mean_d = sh.v[0][head] / C, mean_dx = sh.v[1][head] / C;
      for (int64_t c = pos.lane(t); c < C; c += lanes)
        gx[r * C + c] = static_cast<T>(math::layer_norm_dx(math::layer_norm_d(g[r * C + c], w, c),
                                                           (x[r * C + c] - mu) * rstd, rstd, mean_d, mean_dx));
    });
  }
};

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
  int64_t C = x.size(-1), rows = x.numel() / C;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int lanes = kernel::reduce_width(C);
    kernel::launch_blocks("layer_norm", x.device(), kernel::row_blocks(rows, lanes),
                          ForwardRows<T>{x.device_data<T>(), maybe<T>(weight), maybe<T>(bias), y.device_data<T>(),
                                         stats.device_data<double>(), rows, C, eps, lanes});
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g, const Tensor& gx,
                         const Tensor& gw, const Tensor& gb) {
  int64_t C = x.size(-1), rows = x.numel() / C;
  dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int lanes = kernel::reduce_width(C);
    kernel::launch_blocks("layer_norm_backward", x.device(), kernel::row_blocks(rows, lanes),
                          BackwardRows<T>{x.device_data<T>(), maybe<T>(weight), stats.device_data<double>(),
                                          g.device_data<T>(), gx.device_data<T>(), rows, C, lanes});
    if (gw.defined() || gb.defined()) {
      const int width = kernel::reduce_width(C);
      kernel::launch_blocks("layer_norm_params", x.device(), (C + width - 1) / width,
                            ParamTiles<T>{x.device_data<T>(), stats.device_data<double>(), g.device_data<T>(),
                                          maybe_out<T>(gw), maybe_out<T>(gb), rows, C, width});
    }
  });
}

}  // namespace qkv::nn::device
