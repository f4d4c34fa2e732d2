// Device kernels of the bool ops and comparisons (masks): one thread per element.
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

// out = a and/or b with broadcasting, or not a
struct BoolKernel {
  const bool* a;
  const bool* b;
  bool* out;
  kernel::StridedIndex<2> index;
  math::Logic op;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[2];
    index.offsets(i, off);
    out[i] = op == math::Logic::Not   ? !a[off[0]]
             : op == math::Logic::And ? a[off[0]] && b[off[1]]
                                      : a[off[0]] || b[off[1]];
  }
};

// out = x < value or x == value, compared in double as on the CPU (which rounded a float32 tensor's value)
template <class T> struct CompareKernel {
  const T* x;
  bool* out;
  double value;
  bool less;
  QKV_HD void operator()(int64_t i) const {
    double v = static_cast<double>(x[i]);
    out[i] = less ? v < value : v == value;
  }
};

}  // namespace

void logic(math::Logic op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Tensor& second = op == math::Logic::Not ? a : b;
  auto index = kernel::strided_index<2>(
      "logic", out.shape(),
      {detail::broadcast_strides(a.shape(), out.shape()), detail::broadcast_strides(second.shape(), out.shape())});
  kernel::launch("logic", a.device(), out.numel(),
                 BoolKernel{a.device_data<bool>(), second.device_data<bool>(), out.device_data<bool>(), index, op});
}

void compare(const Tensor& x, double value, bool less, const Tensor& out) {
  auto run = [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("compare", x.device(), x.numel(),
                   CompareKernel<T>{x.device_data<T>(), out.device_data<bool>(), value, less});
  };
  if (x.dtype() == DType::Int64) return run(int64_t{});
  dispatch_floating(x.dtype(), less ? "less" : "equal", run);
}

}  // namespace qkv::device
