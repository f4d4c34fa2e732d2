// Softmax and log-softmax: forward and backward side by side.
#include "autograd/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/softmax_math.h"
#include "autograd/parallel.h"
#include "autograd/simd.h"

namespace qkv {

QKV_DECLARE_OP(softmax);
QKV_DECLARE_OP(log_softmax);

namespace {

struct Rows {
  int64_t outer = 1, size = 1, inner = 1;  // x viewed as [outer, size, inner], reduced over size
};

Rows rows_of(const char* op, const Tensor& x, int64_t dim) {
  Rows r;
  if (x.dim() == 0) return check_scalar_dim(op, dim), r;  // one row of one element, as torch
  int64_t d = normalize_dim(op, dim, x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d)
      r.outer *= x.shape()[i];
    else if (i == d)
      r.size = x.shape()[i];
    else
      r.inner *= x.shape()[i];
  }
  return r;
}

// Runs row(item) for every row along the softmax dim, threaded over rows.
template <class Row> void for_each_row(const Rows& r, const Row& row) {
  parallel_for(r.outer * r.inner, r.size * 4, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) row(item);
  });
}

// One contiguous float32 softmax row through the vector kernels; the same
// rules as the scalar path (NaN propagates, a fully masked row gives zeros).
void softmax_row_f32(const float* in, float* out, int64_t n) {
  float top = simd::max(in, n);
  if (top == -std::numeric_limits<float>::infinity()) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  double total = simd::exp_shifted_sum(in, top, out, n);
  simd::scale(out, static_cast<float>(1.0 / total), n);
}

template <bool Log> Tensor softmax_forward(const char* op, const Tensor& x, const Rows& r) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!x.device().is_cpu()) {
    device::softmax(x, y, r.size, r.inner, Log);
    return y;
  }
  dispatch_floating(x.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    if constexpr (std::is_same_v<T, float>)
      if (r.inner == 1 && !Log)  // contiguous float32 rows: the vector kernels
        return for_each_row(r, [&](int64_t item) { softmax_row_f32(px + item * r.size, py + item * r.size, r.size); });
    for_each_row(r, math::SoftmaxRow<T, Log>{px, py, {r.size, r.inner}});  // the scalar rows the device kernels run too
  });
  return y;
}

}  // namespace

// dx = y ⊙ (g - Σ g⊙y)
Tensor softmax(const Tensor& x, int64_t dim) {
  Rows r = rows_of("softmax", x, dim);
  Tensor y = softmax_forward<false>("softmax", x, r);
  if (needs_grad({x}))
    record("softmax", y, {x}, [r, y = y.detach()](const Tensor& g) -> std::vector<Tensor> {
      Tensor gx = Tensor::empty(y.shape(), y.dtype(), y.device());
      if (!y.device().is_cpu()) {
        device::softmax_backward(y, g, gx, r.size, r.inner, false);
        return {gx};
      }
      dispatch_floating(y.dtype(), "softmax", [&](auto zero) {
        using T = decltype(zero);
        const T *py = y.data<T>(), *pg = g.data<T>();
        T* pgx = gx.data<T>();
        if constexpr (std::is_same_v<T, float>)
          if (r.inner == 1)
            return for_each_row(r, [&](int64_t item) {
              int64_t at = item * r.size;
              simd::softmax_backward_row(py + at, pg + at, pgx + at, r.size);
            });
        for_each_row(r, math::SoftmaxBackwardRow<T, false>{py, pg, pgx, {r.size, r.inner}});
      });
      return {gx};
    });
  return y;
}

// dx = g - exp(y) Σ g
Tensor log_softmax(const Tensor& x, int64_t dim) {
  Rows r = rows_of("log_softmax", x, dim);
  Tensor y = softmax_forward<true>("log_softmax", x, r);
  if (needs_grad({x}))
    record("log_softmax", y, {x}, [r, y = y.detach()](const Tensor& g) -> std::vector<Tensor> {
      Tensor gx = Tensor::empty(y.shape(), y.dtype(), y.device());
      if (!y.device().is_cpu()) {
        device::softmax_backward(y, g, gx, r.size, r.inner, true);
        return {gx};
      }
      dispatch_floating(y.dtype(), "log_softmax", [&](auto zero) {
        using T = decltype(zero);
        const T *py = y.data<T>(), *pg = g.data<T>();
        T* pgx = gx.data<T>();
        for_each_row(r, math::SoftmaxBackwardRow<T, true>{py, pg, pgx, {r.size, r.inner}});
      });
      return {gx};
    });
  return y;
}

}  // namespace qkv
