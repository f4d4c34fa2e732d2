// Device kernels of the optimizers: one element per thread, running the
// CPU's scalar math (optimizer_math.h); clip_grad_norm's squares a block of
// threads per block of elements.
#include "autograd/ops/kernel.h"
#include "optim/device_kernels.h"

namespace qkv::optim::device {

void sgd_step(const SGDStep& s, const Tensor& param, const Tensor& grad, const Tensor& buffer) {
  dispatch_floating(param.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("sgd", param.device(), param.numel(),
                   math::SGDItem<T>{s, param.device_data<T>(), grad.device_data<T>(),
                                    buffer.defined() ? buffer.device_data<T>() : nullptr});
  });
}

void adam_step(const AdamStep& s, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v) {
  dispatch_floating(param.dtype(), "Adam", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch(
        "adam", param.device(), param.numel(),
        math::AdamItem<T>{s, param.device_data<T>(), grad.device_data<T>(), m.device_data<T>(), v.device_data<T>()});
  });
}

namespace {

// Σ g² over elements [k·block, (k + 1)·block): each thread sums a strided
// 256th of them in double, then the threads' sums add up a tree (a fixed
// order, so the same sum on every run).
template <class T> struct SquaresBlocks {
  static constexpr int kThreads = 256;
  struct Shared {
    double sums[kThreads];
  };
  const T* g;
  double* partial;
  int64_t n, block;
  QKV_HD void operator()(int64_t k, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    threads.each([&](int t) {
      double s = 0;
      for (int64_t i = k * block + t, end = i - t + block < n ? i - t + block : n; i < end; i += kThreads)
        s += static_cast<double>(g[i]) * g[i];
      sh.sums[t] = s;
    });
    for (int half = kThreads / 2; half > 0; half /= 2)
      threads.each([&](int t) {
        if (t < half) sh.sums[t] += sh.sums[t + half];
      });
    threads.each([&](int t) {
      if (t == 0) partial[k] = sh.sums[0];
    });
  }
};

}  // namespace

void squared_block_sums(const Tensor& grad, int64_t block, const Tensor& out, int64_t at) {
  int64_t n = grad.numel(), blocks = (n + block - 1) / block;
  dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch_blocks("clip_grad_norm", grad.device(), blocks,
                          SquaresBlocks<T>{grad.device_data<T>(), out.device_data<double>() + at, n, block});
  });
}

void scale(const Tensor& grad, double factor) {
  dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("clip_grad_norm_scale", grad.device(), grad.numel(),
                   math::ScaleItem<T>{grad.device_data<T>(), factor});
  });
}

}  // namespace qkv::optim::device
