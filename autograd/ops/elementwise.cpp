// Elementwise ops: forward and backward side by side.
#include "autograd/ops/elementwise.h"

#include <cmath>
#include <type_traits>

#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/elementwise_math.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/strided_loop.h"
#include "autograd/simd.h"

namespace qkv {

QKV_DECLARE_OP(add);
QKV_DECLARE_OP(sub);
QKV_DECLARE_OP(mul);
QKV_DECLARE_OP(div);
QKV_DECLARE_OP(add_scalar);
QKV_DECLARE_OP(sub_scalar);
QKV_DECLARE_OP(rsub_scalar);
QKV_DECLARE_OP(mul_scalar);
QKV_DECLARE_OP(div_scalar);
QKV_DECLARE_OP(rdiv_scalar);
QKV_DECLARE_OP(neg);
QKV_DECLARE_OP(exp);
QKV_DECLARE_OP(log);
QKV_DECLARE_OP(sqrt);
QKV_DECLARE_OP(pow);
QKV_DECLARE_OP(tanh);
QKV_DECLARE_OP(relu);
QKV_DECLARE_OP(sigmoid);
QKV_DECLARE_OP(abs);
QKV_DECLARE_OP(gelu);
QKV_DECLARE_OP(gelu_tanh);
QKV_DECLARE_OP(clone);

namespace {

// ---- kernels ----

// out = f(a, b) with a and b broadcast to a common shape.
template <class F> Tensor broadcast_binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  common_device(op, {a, b});
  QKV_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", dtype_name(a.dtype()), " ", shape_str(a.shape()), " and ",
            dtype_name(b.dtype()), " ", shape_str(b.shape()));
  Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  if (!a.device().is_cpu()) return device::binary(F::kind, a, b, shape);
  Tensor out = Tensor::empty(shape, a.dtype());
  dispatch_floating(a.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    if (a.shape() == b.shape()) {  // the common case: one flat loop
      parallel_for(out.numel(), 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], pb[i]);
      });
      return;
    }
    detail::StridedLoop<2> loop(
        shape, {detail::broadcast_strides(a.shape(), shape), detail::broadcast_strides(b.shape(), shape)});
    loop.for_each_segment(1, [&](int64_t o, std::array<int64_t, 2> off, int64_t len) {
      const T* x = pa + off[0];
      const T* y = pb + off[1];
      int64_t sx = loop.inner_stride[0], sy = loop.inner_stride[1];
      if (sx == 1 && sy == 1) {
        for (int64_t i = 0; i < len; ++i) po[o + i] = f(x[i], y[i]);
      } else if (sx == 1 && sy == 0) {
        for (int64_t i = 0; i < len; ++i) po[o + i] = f(x[i], *y);
      } else if (sx == 0 && sy == 1) {
        for (int64_t i = 0; i < len; ++i) po[o + i] = f(*x, y[i]);
      } else {
        for (int64_t i = 0; i < len; ++i) po[o + i] = f(x[i * sx], y[i * sy]);
      }
    });
  });
  return out;
}

// Vectorised float32 kernels (autograd/simd.h) an op may use instead of its
// scalar lambdas; float64 always runs the scalar lambdas, the reference.
using VectorMap = void (*)(const float* x, float* y, int64_t n);
using VectorGrad = void (*)(const float* x, const float* g, float* gx, int64_t n);

// out = m.f(x); `cost` is a rough per-element cost for the threading threshold.
template <class M> Tensor map_unary(const char* op, const Tensor& x, int64_t cost, M m, VectorMap vf = nullptr) {
  if (!x.device().is_cpu()) return device::unary(M::kind, m.s, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(x.numel(), cost, [&](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float>)
        if (vf) return vf(px + begin, po + begin, end - begin);
      for (int64_t i = begin; i < end; ++i) po[i] = m.f(px[i]);
    });
  });
  return out;
}

// An elementwise op y = m.f(x) whose derivative is dy/dx = m.df(x, y)
// (elementwise_math.h); vdf, when given, computes gx = g·f'(x) from x alone
// for float32.
template <class M>
Tensor unary_op(const char* op, const Tensor& x, int64_t cost, M m, VectorMap vf = nullptr, VectorGrad vdf = nullptr) {
  Tensor y = map_unary(op, x, cost, m, vf);
  if (needs_grad({x})) {
    record(op, y, {x}, [op, x = x.detach(), y = y.detach(), m, vdf](const Tensor& g) -> std::vector<Tensor> {
      if (!x.device().is_cpu()) return {device::unary_backward(M::kind, m.s, x, y, g)};
      Tensor gx = Tensor::empty(x.shape(), x.dtype());
      dispatch_floating(x.dtype(), op, [&](auto zero) {
        using T = decltype(zero);
        const T *px = x.data<T>(), *py = y.data<T>(), *pg = g.data<T>();
        T* pgx = gx.data<T>();
        parallel_for(x.numel(), vdf ? 8 : 2, [&](int64_t begin, int64_t end) {
          if constexpr (std::is_same_v<T, float>)
            if (vdf) return vdf(px + begin, pg + begin, pgx + begin, end - begin);
          for (int64_t i = begin; i < end; ++i) pgx[i] = pg[i] * m.df(px[i], py[i]);
        });
      });
      return {gx};
    });
  }
  return y;
}

}  // namespace

// ---- binary ops: d(a+b) = (g, g); d(a-b) = (g, -g); d(ab) = (g b, g a); d(a/b) = (g/b, -g a/b²) ----

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary("add", a, b, math::Add{});
  if (needs_grad({a, b}))
    record("add", out, {a, b},
           [sa = a.shape(), sb = b.shape(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             return {ra ? sum_to(g, sa) : Tensor(), rb ? sum_to(g, sb) : Tensor()};
           });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary("sub", a, b, math::Sub{});
  if (needs_grad({a, b}))
    record("sub", out, {a, b},
           [sa = a.shape(), sb = b.shape(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             return {ra ? sum_to(g, sa) : Tensor(), rb ? sum_to(neg(g), sb) : Tensor()};
           });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary("mul", a, b, math::Mul{});
  if (needs_grad({a, b}))
    record("mul", out, {a, b},
           [a = a.detach(), b = b.detach(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             return {ra ? sum_to(mul(g, b), a.shape()) : Tensor(), rb ? sum_to(mul(g, a), b.shape()) : Tensor()};
           });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary("div", a, b, math::Div{});
  if (needs_grad({a, b}))
    record("div", out, {a, b},
           [a = a.detach(), b = b.detach(), y = out.detach(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             Tensor g_over_b = div(g, b);
             return {ra ? sum_to(g_over_b, a.shape()) : Tensor(),
                     rb ? sum_to(neg(mul(g_over_b, y)), b.shape()) : Tensor()};
           });
  return out;
}

// ---- tensor-scalar ops: the scalar is a constant, so only x gets a gradient ----

Tensor add(const Tensor& a, double s) { return unary_op("add_scalar", a, 1, math::AddScalar{s}); }
Tensor sub(const Tensor& a, double s) { return unary_op("sub_scalar", a, 1, math::SubScalar{s}); }
Tensor sub(double s, const Tensor& a) { return unary_op("rsub_scalar", a, 1, math::RSubScalar{s}); }
Tensor mul(const Tensor& a, double s) { return unary_op("mul_scalar", a, 1, math::MulScalar{s}); }
Tensor div(const Tensor& a, double s) { return unary_op("div_scalar", a, 1, math::DivScalar{s}); }
Tensor div(double s, const Tensor& a) { return unary_op("rdiv_scalar", a, 1, math::RDivScalar{s}); }

// ---- unary functions (their derivatives are in elementwise_math.h) ----

Tensor neg(const Tensor& x) { return unary_op("neg", x, 1, math::Neg{}); }
Tensor exp(const Tensor& x) { return unary_op("exp", x, 8, math::Exp{}, simd::exp); }
Tensor log(const Tensor& x) { return unary_op("log", x, 8, math::Log{}); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", x, 4, math::Sqrt{}); }
Tensor pow(const Tensor& x, double p) { return unary_op("pow", x, 8, math::Pow{p}); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", x, 8, math::Tanh{}, simd::tanh); }
Tensor relu(const Tensor& x) { return unary_op("relu", x, 1, math::Relu{}); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", x, 8, math::Sigmoid{}, simd::sigmoid); }
Tensor abs(const Tensor& x) { return unary_op("abs", x, 1, math::Abs{}); }
Tensor gelu(const Tensor& x) { return unary_op("gelu", x, 8, math::Gelu{}); }
Tensor gelu_tanh(const Tensor& x) {
  return unary_op("gelu_tanh", x, 8, math::GeluTanh{}, simd::gelu_tanh, simd::gelu_tanh_backward);
}

Tensor clone(const Tensor& x) {
  Tensor out = x.to(x.dtype());
  if (needs_grad({x})) record("clone", out, {x}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor Tensor::clone() const { return qkv::clone(*this); }

}  // namespace qkv
