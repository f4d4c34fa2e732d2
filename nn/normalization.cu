// Device kernels of layer norm: one thread per row for y and dx, one per
// column for dw and db, running the CPU's scalar math (normalization_math.h).
#include "autograd/ops/kernel.h"
#include "nn/device_kernels.h"
#include "nn/normalization_math.h"

namespace qkv::nn::device {

namespace {

template <class T> const T* maybe(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }
template <class T> T* maybe_out(const Tensor& t) { return t.defined() ? t.device_data<T>() : nullptr; }

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
    if (gw.defined() || gb.defined())
      kernel::launch("layer_norm_params", x.device(), C,
                     math::LayerNormParamsColumn<T>{x.device_data<T>(), stats.device_data<double>(), g.device_data<T>(),
                                                    maybe_out<T>(gw), maybe_out<T>(gb), rows, C});
  });
}

}  // namespace qkv::nn::device
