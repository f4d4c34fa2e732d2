// Softmax and log-softmax: forward and backward side by side.
#include "autograd/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
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
  int64_t d = normalize_dim(op, dim, x.dim());
  Rows r;
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

// Calls fn(T* row_in, T* row_out, stride) for every row along the softmax dim.
template <class T, class Fn> void for_each_row(const Rows& r, Fn&& fn) {
  parallel_for(r.outer * r.inner, r.size * 4, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t o = item / r.inner, i = item % r.inner;
      fn(o * r.size * r.inner + i, r.inner);
    }
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
    for_each_row<T>(r, [&](int64_t start, int64_t stride) {
      const T* in = px + start;
      T* out = py + start;
      if constexpr (std::is_same_v<T, float>)
        if (stride == 1 && !Log) return softmax_row_f32(in, out, r.size);
      T top = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < r.size; ++j)  // a NaN becomes the max, so it propagates (as in torch)
        if (std::isnan(in[j * stride]) || in[j * stride] > top) top = in[j * stride];
      if (top == -std::numeric_limits<T>::infinity()) {  // fully masked row
        for (int64_t j = 0; j < r.size; ++j) out[j * stride] = Log ? top : T(0);
        return;
      }
      double total = 0;
      for (int64_t j = 0; j < r.size; ++j) {
        T e = std::exp(in[j * stride] - top);
        total += e;
        if (!Log) out[j * stride] = e;
      }
      if (Log) {
        T shift = top + static_cast<T>(std::log(total));
        for (int64_t j = 0; j < r.size; ++j) out[j * stride] = in[j * stride] - shift;
      } else {
        T scale = static_cast<T>(1.0 / total);
        for (int64_t j = 0; j < r.size; ++j) out[j * stride] *= scale;
      }
    });
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
        for_each_row<T>(r, [&](int64_t start, int64_t stride) {
          if constexpr (std::is_same_v<T, float>)
            if (stride == 1) return simd::softmax_backward_row(py + start, pg + start, pgx + start, r.size);
          double dot = 0;
          for (int64_t j = 0; j < r.size; ++j) dot += pg[start + j * stride] * py[start + j * stride];
          for (int64_t j = 0; j < r.size; ++j) {
            int64_t at = start + j * stride;
            pgx[at] = py[at] * static_cast<T>(pg[at] - dot);  // in double: g and Σ g⊙y nearly cancel where y ≈ 1
          }
        });
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
        for_each_row<T>(r, [&](int64_t start, int64_t stride) {
          double total = 0;
          for (int64_t j = 0; j < r.size; ++j) total += pg[start + j * stride];
          for (int64_t j = 0; j < r.size; ++j) {
            int64_t at = start + j * stride;
            pgx[at] = pg[at] - std::exp(py[at]) * static_cast<T>(total);
          }
        });
      });
      return {gx};
    });
  return y;
}

}  // namespace qkv
