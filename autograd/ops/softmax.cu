// Device kernels of softmax and log-softmax: one thread per row, the CPU's
// scalar rules (a NaN propagates, a fully masked row gives zeros, or -inf
// for log-softmax; sums in double).
#include <cmath>
#include <limits>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

// Row `item` of x viewed as [outer, size, inner]: its first element and stride.
struct RowWalk {
  int64_t size, inner;
  QKV_HD int64_t start(int64_t item) const { return item / inner * size * inner + item % inner; }
};

// y = softmax(x) or log_softmax(x) along the row
template <class T, bool Log> struct SoftmaxKernel {
  const T* x;
  T* y;
  RowWalk rows;
  QKV_HD void operator()(int64_t item) const {
    const T* in = x + rows.start(item);
    T* out = y + rows.start(item);
    const int64_t n = rows.size, s = rows.inner;
    const T kMinusInf = -std::numeric_limits<T>::infinity();
    T top = kMinusInf;
    for (int64_t j = 0; j < n; ++j)
      if (in[j * s] != in[j * s] || in[j * s] > top) top = in[j * s];
    if (top == kMinusInf) {
      for (int64_t j = 0; j < n; ++j) out[j * s] = Log ? top : T(0);
      return;
    }
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      T e = std::exp(in[j * s] - top);
      total += e;
      if (!Log) out[j * s] = e;
    }
    if (Log) {
      T shift = top + static_cast<T>(std::log(total));
      for (int64_t j = 0; j < n; ++j) out[j * s] = in[j * s] - shift;
    } else {
      T scale = static_cast<T>(1.0 / total);
      for (int64_t j = 0; j < n; ++j) out[j * s] *= scale;
    }
  }
};

// softmax: gx = y ⊙ (g - Σ g⊙y); log_softmax: gx = g - exp(y) Σ g
template <class T, bool Log> struct SoftmaxBackwardKernel {
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

}  // namespace

void softmax(const Tensor& x, const Tensor& y, int64_t size, int64_t inner, bool log) {
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto zero) {
    using T = decltype(zero);
    int64_t rows = x.numel() / std::max<int64_t>(1, size);
    if (log)
      kernel::launch("log_softmax", x.device(), rows,
                     SoftmaxKernel<T, true>{x.device_data<T>(), y.device_data<T>(), {size, inner}});
    else
      kernel::launch("softmax", x.device(), rows,
                     SoftmaxKernel<T, false>{x.device_data<T>(), y.device_data<T>(), {size, inner}});
  });
}

void softmax_backward(const Tensor& y, const Tensor& g, const Tensor& gx, int64_t size, int64_t inner, bool log) {
  dispatch_floating(y.dtype(), log ? "log_softmax" : "softmax", [&](auto zero) {
    using T = decltype(zero);
    int64_t rows = y.numel() / std::max<int64_t>(1, size);
    if (log)
      kernel::launch(
          "log_softmax_backward", y.device(), rows,
          SoftmaxBackwardKernel<T, true>{y.device_data<T>(), g.device_data<T>(), gx.device_data<T>(), {size, inner}});
    else
      kernel::launch(
          "softmax_backward", y.device(), rows,
          SoftmaxBackwardKernel<T, false>{y.device_data<T>(), g.device_data<T>(), gx.device_data<T>(), {size, inner}});
  });
}

}  // namespace qkv::device
