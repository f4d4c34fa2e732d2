// Device kernels of the optimizers: one element per thread, running the
// CPU's scalar math (optimizer_math.h).
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

Tensor squared_block_sums(const Tensor& grad, int64_t block) {
  int64_t n = grad.numel(), blocks = (n + block - 1) / block;
  Tensor partial = Tensor::empty({blocks}, DType::Float64, grad.device());
  dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("clip_grad_norm", grad.device(), blocks,
                   math::SquaresBlock<T>{grad.device_data<T>(), partial.device_data<double>(), n, block});
  });
  return partial;
}

void scale(const Tensor& grad, double factor) {
  dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("clip_grad_norm_scale", grad.device(), grad.numel(),
                   math::ScaleItem<T>{grad.device_data<T>(), factor});
  });
}

}  // namespace qkv::optim::device
