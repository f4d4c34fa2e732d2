// Bool logic and comparisons: data only, no autograd.
#include "autograd/ops/logical.h"

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/strided_loop.h"

namespace qkv {

namespace {

void check_bool(const char* op, const Tensor& t) {
  QKV_CHECK(t.dtype() == DType::Bool, op, ": expects a bool tensor, got ", dtype_name(t.dtype()), " ",
            shape_str(t.shape()));
}

template <class F> Tensor bool_binary(const char* op, math::Logic kind, const Tensor& a, const Tensor& b, F f) {
  common_device(op, {a, b});
  check_bool(op, a);
  check_bool(op, b);
  Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, DType::Bool, a.device());
  if (!a.device().is_cpu()) {
    device::logic(kind, a, b, out);
    return out;
  }
  const bool* pa = a.data<bool>();
  const bool* pb = b.data<bool>();
  bool* po = out.data<bool>();
  detail::StridedLoop<2> loop(
      shape, {detail::broadcast_strides(a.shape(), shape), detail::broadcast_strides(b.shape(), shape)});
  loop.for_each_segment(1, [&](int64_t o, std::array<int64_t, 2> off, int64_t len) {
    for (int64_t i = 0; i < len; ++i)
      po[o + i] = f(pa[off[0] + i * loop.inner_stride[0]], pb[off[1] + i * loop.inner_stride[1]]);
  });
  return out;
}

// x < value (less) or x == value as a mask.
Tensor compare(const char* op, const Tensor& x, double value, bool less) {
  // As torch: the scalar takes a float tensor's dtype first (equal(float32 2.7f, 2.7) holds); an int64
  // tensor compares in double, exactly where torch's float32 promotion would round.
  if (x.dtype() == DType::Float32) value = static_cast<float>(value);
  Tensor out = Tensor::empty(x.shape(), DType::Bool, x.device());
  if (!x.device().is_cpu()) {
    device::compare(x, value, less, out);
    return out;
  }
  bool* po = out.data<bool>();
  auto run = [&](const auto* px) {
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      const double v = static_cast<double>(px[i]);
      po[i] = less ? v < value : v == value;
    }
  };
  switch (x.dtype()) {
    case DType::Float32: run(x.data<float>()); break;
    case DType::Float64: run(x.data<double>()); break;
    case DType::Int64: run(x.data<int64_t>()); break;
    default: throw Error(cat(op, ": expects a float or int64 tensor, got ", dtype_name(x.dtype())));
  }
  return out;
}

}  // namespace

Tensor logical_not(const Tensor& mask) {
  check_bool("logical_not", mask);
  Tensor out = Tensor::empty(mask.shape(), DType::Bool, mask.device());
  if (!mask.device().is_cpu()) {
    device::logic(math::Logic::Not, mask, mask, out);
    return out;
  }
  const bool* pm = mask.data<bool>();
  bool* po = out.data<bool>();
  for (int64_t i = 0, n = mask.numel(); i < n; ++i) po[i] = !pm[i];
  return out;
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return bool_binary("logical_and", math::Logic::And, a, b, [](bool x, bool y) { return x && y; });
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  return bool_binary("logical_or", math::Logic::Or, a, b, [](bool x, bool y) { return x || y; });
}

Tensor less(const Tensor& x, double value) { return compare("less", x, value, true); }

Tensor equal(const Tensor& x, double value) { return compare("equal", x, value, false); }

}  // namespace qkv
