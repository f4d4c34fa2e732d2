// Device kernels of the elementwise ops (the math is elementwise_math.h's,
// shared with the CPU loops). One thread per output element.
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

// out[i] = m(a[.], b[.]) with a and b read through broadcast strides.
template <class T, class M> struct BinaryKernel {
  const T* a;
  const T* b;
  T* out;
  kernel::StridedIndex<2> index;
  M m;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[2];
    index.offsets(i, off);
    out[i] = m(a[off[0]], b[off[1]]);
  }
};

// y = f(x)
template <class T, class M> struct UnaryKernel {
  const T* x;
  T* y;
  M m;
  QKV_HD void operator()(int64_t i) const { y[i] = m.f(x[i]); }
};

// gx = g·f'(x)
template <class T, class M> struct UnaryBackwardKernel {
  const T* x;
  const T* y;
  const T* g;
  T* gx;
  M m;
  QKV_HD void operator()(int64_t i) const { gx[i] = g[i] * m.df(x[i], y[i]); }
};

}  // namespace

Tensor binary(math::Binary kind, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  auto index = kernel::strided_index<2>(
      "binary", shape, {detail::broadcast_strides(a.shape(), shape), detail::broadcast_strides(b.shape(), shape)});
  math::with_binary(kind, [&](auto m) {
    dispatch_floating(a.dtype(), "binary", [&](auto zero) {
      using T = decltype(zero);
      kernel::launch(
          "binary", a.device(), out.numel(),
          BinaryKernel<T, decltype(m)>{a.device_data<T>(), b.device_data<T>(), out.device_data<T>(), index, m});
    });
  });
  return out;
}

Tensor unary(math::Unary kind, double s, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  math::with_unary(kind, s, [&](auto m) {
    dispatch_floating(x.dtype(), "unary", [&](auto zero) {
      using T = decltype(zero);
      kernel::launch("unary", x.device(), x.numel(),
                     UnaryKernel<T, decltype(m)>{x.device_data<T>(), y.device_data<T>(), m});
    });
  });
  return y;
}

Tensor unary_backward(math::Unary kind, double s, const Tensor& x, const Tensor& y, const Tensor& g) {
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
  math::with_unary(kind, s, [&](auto m) {
    dispatch_floating(x.dtype(), "unary_backward", [&](auto zero) {
      using T = decltype(zero);
      kernel::launch("unary_backward", x.device(), x.numel(),
                     UnaryBackwardKernel<T, decltype(m)>{x.device_data<T>(), y.device_data<T>(), g.device_data<T>(),
                                                         gx.device_data<T>(), m});
    });
  });
  return gx;
}

}  // namespace qkv::device
