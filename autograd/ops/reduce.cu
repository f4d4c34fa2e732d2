// Device kernels of the reductions, x viewed as [outer, reduced, inner]: one
// thread per output element walks its reduced elements in order, summing in
// double as the CPU does.
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

// out[o, i] = Σ_r x[o, r, i]
template <class T> struct SumKernel {
  const T* x;
  T* out;
  int64_t reduced, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t o = item / inner, i = item % inner;
    double acc = 0;
    for (int64_t r = 0; r < reduced; ++r) acc += x[(o * reduced + r) * inner + i];
    out[item] = static_cast<T>(acc);
  }
};

// out[o, i] = max_r x[o, r, i] and its first arg-max; a NaN wins and stops the walk.
template <class T> struct MaxKernel {
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
template <class T> struct MaxBackwardKernel {
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
template <class T> struct MaskedMeanKernel {
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
template <class T> struct MaskedMeanBackwardKernel {
  const T* g;
  const int64_t* lengths;
  T* gx;
  int64_t steps, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t k = item % inner, row = item / inner, t = row % steps, b = row / steps;
    gx[item] = t < lengths[b] ? g[b * inner + k] / static_cast<T>(lengths[b]) : T(0);
  }
};

}  // namespace

void sum_block(const Tensor& x, const Tensor& out, int64_t reduced, int64_t inner) {
  dispatch_floating(x.dtype(), "sum", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("sum", x.device(), out.numel(),
                   SumKernel<T>{x.device_data<T>(), out.device_data<T>(), reduced, inner});
  });
}

void max_block(const Tensor& x, const Tensor& out, const Tensor& argmax, int64_t reduced, int64_t inner) {
  dispatch_floating(x.dtype(), "max", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch(
        "max", x.device(), out.numel(),
        MaxKernel<T>{x.device_data<T>(), out.device_data<T>(), argmax.device_data<int64_t>(), reduced, inner});
  });
}

void max_block_backward(const Tensor& g, const Tensor& argmax, const Tensor& gx, int64_t reduced, int64_t inner) {
  dispatch_floating(g.dtype(), "max", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch(
        "max_backward", g.device(), g.numel(),
        MaxBackwardKernel<T>{g.device_data<T>(), argmax.device_data<int64_t>(), gx.device_data<T>(), reduced, inner});
  });
}

void masked_mean(const Tensor& x, const Tensor& lengths, const Tensor& out) {
  int64_t steps = x.size(1), inner = out.numel() / std::max<int64_t>(1, x.size(0));
  dispatch_floating(x.dtype(), "masked_mean", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch(
        "masked_mean", x.device(), out.numel(),
        MaskedMeanKernel<T>{x.device_data<T>(), lengths.device_data<int64_t>(), out.device_data<T>(), steps, inner});
  });
}

void masked_mean_backward(const Tensor& g, const Tensor& lengths, const Tensor& gx) {
  int64_t steps = gx.size(1), inner = g.numel() / std::max<int64_t>(1, gx.size(0));
  dispatch_floating(g.dtype(), "masked_mean", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("masked_mean_backward", g.device(), gx.numel(),
                   MaskedMeanBackwardKernel<T>{g.device_data<T>(), lengths.device_data<int64_t>(), gx.device_data<T>(),
                                               steps, inner});
  });
}

}  // namespace qkv::device
