// Device kernels of softmax and log-softmax: one thread per row, running the
// row math the CPU's scalar loops run (softmax_math.h).
#include <algorithm>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"
#include "autograd/ops/softmax_math.h"

namespace qkv::device {

void softmax(const Tensor& x, const Tensor& y, int64_t size, int64_t inner, bool log) {
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto zero) {
    using T = decltype(zero);
    int64_t rows = x.numel() / std::max<int64_t>(1, size);
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
