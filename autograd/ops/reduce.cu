// Device kernels of the reductions, x viewed as [outer, reduced, inner]: one
// thread per output element walks its reduced elements in order, summing in
// double as the CPU does; max and masked mean run the CPU's own math
// (reduce_math.h).
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"
#include "autograd/ops/reduce_math.h"

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
        math::MaxColumn<T>{x.device_data<T>(), out.device_data<T>(), argmax.device_data<int64_t>(), reduced, inner});
  });
}

void max_block_backward(const Tensor& g, const Tensor& argmax, const Tensor& gx, int64_t reduced, int64_t inner) {
  dispatch_floating(g.dtype(), "max", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("max_backward", g.device(), g.numel(),
                   math::MaxBackwardItem<T>{g.device_data<T>(), argmax.device_data<int64_t>(), gx.device_data<T>(),
                                            reduced, inner});
  });
}

void masked_mean(const Tensor& x, const Tensor& lengths, const Tensor& out) {
  int64_t steps = x.size(1), inner = out.numel() / std::max<int64_t>(1, x.size(0));
  dispatch_floating(x.dtype(), "masked_mean", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("masked_mean", x.device(), out.numel(),
                   math::MaskedMeanItem<T>{x.device_data<T>(), lengths.device_data<int64_t>(), out.device_data<T>(),
                                           steps, inner});
  });
}

void masked_mean_backward(const Tensor& g, const Tensor& lengths, const Tensor& gx) {
  int64_t steps = gx.size(1), inner = g.numel() / std::max<int64_t>(1, gx.size(0));
  dispatch_floating(g.dtype(), "masked_mean", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("masked_mean_backward", g.device(), gx.numel(),
                   math::MaskedMeanBackwardItem<T>{g.device_data<T>(), lengths.device_data<int64_t>(),
                                                   gx.device_data<T>(), steps, inner});
  });
}

}  // namespace qkv::device
