// Device kernels of the reductions, x viewed as [outer, reduced, inner]. A
// sum over many elements takes a block of threads per 32 (or fewer) outputs
// (kernel::add_lanes); over a few, one thread per output walks its reduced
// elements in order. Both sum in double as the CPU does; max and masked
// mean run the CPU's own math (reduce_math.h).
#include <algorithm>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"
#include "autograd/ops/reduce_math.h"

namespace qkv::device {

namespace {

// From this many elements a sum, a block of threads sums each output (fewer:
// a thread each, which wastes no threads on short sums).
constexpr int64_t kSumTilesFrom = 32;

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

// out[o, i0 + c] = scale·Σ_r x[o, r, i0 + c] for the block's `width` columns from i0.
template <class In, class Out> struct SumTiles {
  static constexpr int kThreads = kernel::kReduceThreads;
  using Shared = kernel::LaneSums<1>;
  const In* x;
  Out* out;
  int64_t reduced, inner;
  int width;
  double scale;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const int64_t tiles = (inner + width - 1) / width, o = block / tiles, i0 = block % tiles * width;
    threads.each([&](int t) {
      const int64_t i = i0 + t % width;
      double acc = 0;
      if (i < inner)
        for (int64_t r = t / width; r < reduced; r += kThreads / width) acc += x[(o * reduced + r) * inner + i];
      sh.v[0][t] = acc;
    });
    kernel::add_lanes(sh, width, threads);
    threads.each([&](int t) {
      if (t < width && i0 + t < inner) out[o * inner + i0 + t] = static_cast<Out>(sh.v[0][t] * scale);
    });
  }
};

}  // namespace

template <class In, class Out>
void sum_tiles(Device device, const In* x, Out* out, int64_t outer, int64_t reduced, int64_t inner, double scale) {
  const int width = kernel::reduce_width(inner);
  kernel::launch_blocks("sum", device, outer * ((inner + width - 1) / width),
                        SumTiles<In, Out>{x, out, reduced, inner, width, scale});
}
template void sum_tiles<double, float>(Device, const double*, float*, int64_t, int64_t, int64_t, double);
template void sum_tiles<double, double>(Device, const double*, double*, int64_t, int64_t, int64_t, double);

void sum_block(const Tensor& x, const Tensor& out, int64_t reduced, int64_t inner) {
  dispatch_floating(x.dtype(), "sum", [&](auto zero) {
    using T = decltype(zero);
    if (reduced >= kSumTilesFrom)
      sum_tiles(x.device(), x.device_data<T>(), out.device_data<T>(), out.numel() / std::max<int64_t>(inner, 1),
                reduced, inner, 1.0);
    else
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
