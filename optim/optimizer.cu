// Device kernels of the optimizers: one element per thread, in the float64
// arithmetic of optimizer.cpp's scalar loops (its float32 vector lanes are a
// CPU speed-up of the same formulas).
#include <cmath>

#include "autograd/ops/kernel.h"
#include "optim/device_kernels.h"

namespace qkv::optim::device {

namespace {

// d = g + wd·p;  b = first ? d : μ·b + (1 − τ)·d;  d = nesterov ? d + μ·b : b;  p -= lr·d
template <class T> struct SGDKernel {
  SGDStep s;
  T* p;
  const T* g;
  T* b;  // null without momentum
  QKV_HD void operator()(int64_t i) const {
    double d = g[i] + s.weight_decay * p[i];
    if (b) {
      b[i] = static_cast<T>(s.first ? d : s.momentum * b[i] + (1 - s.dampening) * d);
      d = s.nesterov ? d + s.momentum * b[i] : b[i];
    }
    p[i] = static_cast<T>(p[i] - s.lr * d);
  }
};

// d = g + l2·p;  m = β1·m + (1 − β1)·d;  v = β2·v + (1 − β2)·d²;
// p = p·shrink − lr·(m/bc1) / (√(v/bc2) + ε)
template <class T> struct AdamKernel {
  AdamStep s;
  T* p;
  const T* g;
  T* m;
  T* v;
  QKV_HD void operator()(int64_t i) const {
    double d = g[i] + s.l2 * p[i];
    m[i] = static_cast<T>(s.beta1 * m[i] + (1 - s.beta1) * d);
    v[i] = static_cast<T>(s.beta2 * v[i] + (1 - s.beta2) * d * d);
    double step = (m[i] / s.bias_correction1) / (std::sqrt(v[i] / s.bias_correction2) + s.eps);
    p[i] = static_cast<T>(p[i] * s.shrink - s.lr * step);
  }
};

// partial[k] = Σ g² over block k, in order
template <class T> struct SquaresKernel {
  const T* g;
  double* partial;
  int64_t n, block;
  QKV_HD void operator()(int64_t k) const {
    double s = 0;
    for (int64_t i = k * block, end = i + block < n ? i + block : n; i < end; ++i)
      s += static_cast<double>(g[i]) * g[i];
    partial[k] = s;
  }
};

template <class T> struct ScaleKernel {
  T* g;
  double factor;
  QKV_HD void operator()(int64_t i) const { g[i] = static_cast<T>(g[i] * factor); }
};

}  // namespace

void sgd_step(const SGDStep& s, const Tensor& param, const Tensor& grad, const Tensor& buffer) {
  dispatch_floating(param.dtype(), "SGD", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("sgd", param.device(), param.numel(),
                   SGDKernel<T>{s, param.device_data<T>(), grad.device_data<T>(),
                                buffer.defined() ? buffer.device_data<T>() : nullptr});
  });
}

void adam_step(const AdamStep& s, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v) {
  dispatch_floating(param.dtype(), "Adam", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch(
        "adam", param.device(), param.numel(),
        AdamKernel<T>{s, param.device_data<T>(), grad.device_data<T>(), m.device_data<T>(), v.device_data<T>()});
  });
}

Tensor squared_block_sums(const Tensor& grad, int64_t block) {
  int64_t n = grad.numel(), blocks = (n + block - 1) / block;
  Tensor partial = Tensor::empty({blocks}, DType::Float64, grad.device());
  dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("clip_grad_norm", grad.device(), blocks,
                   SquaresKernel<T>{grad.device_data<T>(), partial.device_data<double>(), n, block});
  });
  return partial;
}

void scale(const Tensor& grad, double factor) {
  dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("clip_grad_norm_scale", grad.device(), grad.numel(), ScaleKernel<T>{grad.device_data<T>(), factor});
  });
}

}  // namespace qkv::optim::device
