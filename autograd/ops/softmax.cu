// Device kernels of softmax and log-softmax. Along the last dim (rows of
// adjacent values, as attention's scores): a block of threads per 8 rows, 32
// lanes a row (fewer for short rows; kernel::fold_row_lanes), with the math
// of softmax_math.h's rows split among the lanes. Along another dim: one
// thread per row, running that math as the CPU's scalar loops do.
#include <algorithm>
#include <limits>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"
#include "autograd/ops/softmax_math.h"

namespace qkv::device {

namespace {

// y = softmax(x) or log_softmax(x) along rows of `size` adjacent values: the
// lanes' maxima folded (a NaN wins), then their Σ e^(x − max) in double.
template <class T, bool Log> struct SoftmaxLanes {
  static constexpr int kThreads = kernel::kReduceThreads;
  struct Shared {
    T top[kThreads];
    double total[kThreads];
  };
  const T* x;
  T* y;
  int64_t rows, size;
  int lanes;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const kernel::RowLanes pos(block, lanes);
    const T kMinusInf = -std::numeric_limits<T>::infinity();
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      T top = kMinusInf;
      if (r < rows)
        for (int64_t j = pos.lane(u); j < size; j += lanes)
          if (x[r * size + j] != x[r * size + j] || x[r * size + j] > top) top = x[r * size + j];
      sh.top[u] = top;
    });
    kernel::fold_row_lanes(threads, lanes, [&](int into, int from) {
      if (sh.top[from] != sh.top[from] || sh.top[from] > sh.top[into]) sh.top[into] = sh.top[from];
    });
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      const T top = sh.top[pos.head(u)];
      double total = 0;
      if (r < rows && top != kMinusInf)
        for (int64_t j = pos.lane(u); j < size; j += lanes) {
          const T e = std::exp(x[r * size + j] - top);
          total += e;
          if (!Log) y[r * size + j] = e;
        }
      sh.total[u] = total;
    });
    kernel::fold_row_lanes(threads, lanes, [&](int into, int from) { sh.total[into] += sh.total[from]; });
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      if (r >= rows) return;
      const int head = pos.head(u);
      const T top = sh.top[head];
      for (int64_t j = pos.lane(u); j < size; j += lanes) {
        const int64_t at = r * size + j;
        if (top == kMinusInf)  // fully masked row
          y[at] = Log ? top : T(0);
        else if (Log)
          y[at] = (x[at] - top) - static_cast<T>(std::log(sh.total[head]));  // as SoftmaxRow
        else
          y[at] *= static_cast<T>(1.0 / sh.total[head]);
      }
    });
  }
};

// softmax: gx = y ⊙ (g − Σ g⊙y); log_softmax: gx = g − exp(y)·Σ g, the sum in
// double, along rows of `size` adjacent values.
template <class T, bool Log> struct SoftmaxBackwardLanes {
  static constexpr int kThreads = kernel::kReduceThreads;
  using Shared = kernel::LaneSums<1>;
  const T* y;
  const T* g;
  T* gx;
  int64_t rows, size;
  int lanes;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const kernel::RowLanes pos(block, lanes);
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      double total = 0;
      if (r < rows)
        for (int64_t j = pos.lane(u); j < size; j += lanes) {
          const int64_t at = r * size + j;
          total += Log ? g[at] : g[at] * y[at];
        }
      sh.v[0][u] = total;
    });
    kernel::add_row_lanes(sh, threads, lanes);
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      if (r >= rows) return;
      const double total = sh.v[0][pos.head(u)];
      for (int64_t j = pos.lane(u); j < size; j += lanes) {
        const int64_t at = r * size + j;
        gx[at] = Log ? g[at] - std::exp(y[at]) * static_cast<T>(total) : y[at] * static_cast<T>(g[at] - total);
      }
    });
  }
};

}  // namespace

void softmax(const Tensor& x, const Tensor& y, int64_t size, int64_t inner, bool log) {
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto zero) {
    using T = decltype(zero);
    int64_t rows = x.numel() / std::max<int64_t>(1, size);
    if (inner == 1) {
      const int lanes = kernel::reduce_width(size);
      if (log)
        kernel::launch_blocks("log_softmax", x.device(), kernel::row_blocks(rows, lanes),
                              SoftmaxLanes<T, true>{x.device_data<T>(), y.device_data<T>(), rows, size, lanes});
      else
        kernel::launch_blocks("softmax", x.device(), kernel::row_blocks(rows, lanes),
                              SoftmaxLanes<T, false>{x.device_data<T>(), y.device_data<T>(), rows, size, lanes});
      return;
    }
    if (log)
      kernel::launch("log_softmax", x.device(), rows,
                     math::SoftmaxRow<T, true>{x.device_data<T>(), y.device_data<T>(), {size, inner}});
    else
      kernel::launch("softmax", x.device(), rows,
                     math::SoftmaxRow<T, false>{x.device_data<T>(), y.device_data<T>(), {size, inner}});
  });
}

void softmax_backward(const Tensor& y, const Tensor& g, const Tensor& gx, int64_t size, int64_t inner, bool log) {
  dispatch_floating(y.dtype(), log ? "log_softmax" : "softmax", [&](auto zero) {
    using T = decltype(zero);
    int64_t rows = y.numel() / std::max<int64_t>(1, size);
    if (inner == 1) {
      const int lanes = kernel::reduce_width(size);
      if (log)
        kernel::launch_blocks("log_softmax_backward", y.device(), kernel::row_blocks(rows, lanes),
                              SoftmaxBackwardLanes<T, true>{y.device_data<T>(), g.device_data<T>(), gx.device_data<T>(),
                                                            rows, size, lanes});
      else
        kernel::launch_blocks("softmax_backward", y.device(), kernel::row_blocks(rows, lanes),
                              SoftmaxBackwardLanes<T, false>{y.device_data<T>(), g.device_data<T>(),
                                                             gx.device_data<T>(), rows, size, lanes});
      return;
    }
    if (log)
      kernel::launch("log_softmax_backward", y.device(), rows,
                     math::SoftmaxBackwardRow<T, true>{
                         y.device_data<T>(), g.device_data<T>(), gx.device_data<T>(), {size, inner}});
    else
      kernel::launch("softmax_backward", y.device(), rows,
                     math::SoftmaxBackwardRow<T, false>{
                         y.device_data<T>(), g.device_data<T>(), gx.device_data<T>(), {size, inner}});
  });
}

}  // namespace qkv::device
