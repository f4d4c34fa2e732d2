// Internal: the math of every elementwise op, written once for the CPU loops
// (elementwise.cpp) and the device kernels (elementwise.cu). A unary op is
// y = f(x) with derivative df(x, y) = dy/dx; `s` is a scalar operand.
#pragma once

#include <cmath>
#include <cstdint>

#include "autograd/ops/kernel.h"

namespace qkv::math {

enum class Binary : uint8_t { Add, Sub, Mul, Div };
enum class Logic : uint8_t { And, Or, Not };

struct Add {
  static constexpr Binary kind = Binary::Add;
  template <class T> QKV_HD T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  static constexpr Binary kind = Binary::Sub;
  template <class T> QKV_HD T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  static constexpr Binary kind = Binary::Mul;
  template <class T> QKV_HD T operator()(T a, T b) const { return a * b; }
};
struct Div {
  static constexpr Binary kind = Binary::Div;
  template <class T> QKV_HD T operator()(T a, T b) const { return a / b; }
};

enum class Unary : uint8_t {
  AddScalar,
  SubScalar,
  RSubScalar,
  MulScalar,
  DivScalar,
  RDivScalar,
  Neg,
  Exp,
  Log,
  Sqrt,
  Pow,
  Tanh,
  Relu,
  Sigmoid,
  Abs,
  Gelu,
  GeluTanh,
};

// x + s, x - s, s - x, x·s, x/s, s/x: d = 1, 1, -1, s, 1/s and -s/x² = -y/x
struct AddScalar {
  static constexpr Unary kind = Unary::AddScalar;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return x + T(s); }
  template <class T> QKV_HD T df(T, T) const { return T(1); }
};
struct SubScalar {
  static constexpr Unary kind = Unary::SubScalar;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return x - T(s); }
  template <class T> QKV_HD T df(T, T) const { return T(1); }
};
struct RSubScalar {
  static constexpr Unary kind = Unary::RSubScalar;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return T(s) - x; }
  template <class T> QKV_HD T df(T, T) const { return T(-1); }
};
struct MulScalar {
  static constexpr Unary kind = Unary::MulScalar;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return x * T(s); }
  template <class T> QKV_HD T df(T, T) const { return T(s); }
};
struct DivScalar {
  static constexpr Unary kind = Unary::DivScalar;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return x / T(s); }
  template <class T> QKV_HD T df(T, T) const { return T(1) / T(s); }
};
struct RDivScalar {
  static constexpr Unary kind = Unary::RDivScalar;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return T(s) / x; }
  template <class T> QKV_HD T df(T x, T y) const { return -y / x; }
};
// d(-x) = -1
struct Neg {
  static constexpr Unary kind = Unary::Neg;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return -x; }
  template <class T> QKV_HD T df(T, T) const { return T(-1); }
};
// d exp(x) = exp(x) = y
struct Exp {
  static constexpr Unary kind = Unary::Exp;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return std::exp(x); }
  template <class T> QKV_HD T df(T, T y) const { return y; }
};
// d log(x) = 1/x
struct Log {
  static constexpr Unary kind = Unary::Log;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return std::log(x); }
  template <class T> QKV_HD T df(T x, T) const { return T(1) / x; }
};
// d sqrt(x) = 1/(2 sqrt(x)) = 1/(2y)
struct Sqrt {
  static constexpr Unary kind = Unary::Sqrt;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return std::sqrt(x); }
  template <class T> QKV_HD T df(T, T y) const { return T(1) / (2 * y); }
};
// d x^p = p x^(p-1); p = 0 gives 0 everywhere (as in PyTorch, also at x = 0)
struct Pow {
  static constexpr Unary kind = Unary::Pow;
  double s = 0;
  // torch takes sqrt for ^0.5 and 1/sqrt for ^-0.5, which differ from C's pow at -0 (-0^0.5 = -0 and
  // -0^-0.5 = -inf, where pow gives +0 and +inf) and at -inf (NaN, where pow gives +inf and +0); in the
  // gradient too.
  template <class T> QKV_HD static T power(T x, double e) {
    return e == 0.5 ? std::sqrt(x) : e == -0.5 ? T(1) / std::sqrt(x) : std::pow(x, T(e));
  }
  template <class T> QKV_HD T f(T x) const { return power(x, s); }
  template <class T> QKV_HD T df(T x, T) const { return s == 0 ? T(0) : T(s) * power(x, s - 1); }
};
// d tanh(x) = 1 - y²
struct Tanh {
  static constexpr Unary kind = Unary::Tanh;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return std::tanh(x); }
  template <class T> QKV_HD T df(T, T y) const { return 1 - y * y; }
};
// d relu(x) = [x > 0]; NaN stays NaN, and passes the gradient on (torch's threshold_backward: 0 where x <= 0)
struct Relu {
  static constexpr Unary kind = Unary::Relu;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return x > 0 || x != x ? x : T(0); }
  template <class T> QKV_HD T df(T x, T) const { return x <= 0 ? T(0) : T(1); }
};
// d sigmoid(x) = y (1 - y); the two branches keep exp from overflowing
struct Sigmoid {
  static constexpr Unary kind = Unary::Sigmoid;
  double s = 0;
  template <class T> QKV_HD T f(T x) const {
    if (x >= 0) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }
  template <class T> QKV_HD T df(T, T y) const { return y * (1 - y); }
};
// d |x| = sign(x), 0 at 0
struct Abs {
  static constexpr Unary kind = Unary::Abs;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return std::abs(x); }
  template <class T> QKV_HD T df(T x, T) const { return x > 0 ? T(1) : x < 0 ? T(-1) : T(0); }
};
// gelu = x·Φ(x); d gelu = Φ(x) + x·φ(x)
struct Gelu {
  static constexpr Unary kind = Unary::Gelu;
  double s = 0;
  template <class T> QKV_HD T f(T x) const { return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2))); }
  template <class T> QKV_HD T df(T x, T) const {
    T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
    T pdf = std::exp(T(-0.5) * x * x) * T(0.5 * M_2_SQRTPI * M_SQRT1_2);
    return cdf + x * pdf;
  }
};
// with u = √(2/π)(x + 0.044715x³) and t = tanh(u): gelu_tanh = 0.5·x·(1 + t),
// d = 0.5(1 + t) + 0.5·x·(1 - t²)·√(2/π)(1 + 3·0.044715x²)
constexpr double kGeluK = 0.7978845608028654;  // √(2/π)
constexpr double kGeluC = 0.044715;
struct GeluTanh {
  static constexpr Unary kind = Unary::GeluTanh;
  double s = 0;
  template <class T> QKV_HD T f(T x) const {
    return T(0.5) * x * (T(1) + std::tanh(T(kGeluK) * (x + T(kGeluC) * x * x * x)));
  }
  template <class T> QKV_HD T df(T x, T) const {
    T t = std::tanh(T(kGeluK) * (x + T(kGeluC) * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kGeluK) * (T(1) + T(3 * kGeluC) * x * x);
  }
};

/// fn(M{s}) with the math struct M of `kind`: a device launcher's one switch.
template <class Fn> void with_unary(Unary kind, double s, Fn&& fn) {
  switch (kind) {
    case Unary::AddScalar: return fn(AddScalar{s});
    case Unary::SubScalar: return fn(SubScalar{s});
    case Unary::RSubScalar: return fn(RSubScalar{s});
    case Unary::MulScalar: return fn(MulScalar{s});
    case Unary::DivScalar: return fn(DivScalar{s});
    case Unary::RDivScalar: return fn(RDivScalar{s});
    case Unary::Neg: return fn(Neg{s});
    case Unary::Exp: return fn(Exp{s});
    case Unary::Log: return fn(Log{s});
    case Unary::Sqrt: return fn(Sqrt{s});
    case Unary::Pow: return fn(Pow{s});
    case Unary::Tanh: return fn(Tanh{s});
    case Unary::Relu: return fn(Relu{s});
    case Unary::Sigmoid: return fn(Sigmoid{s});
    case Unary::Abs: return fn(Abs{s});
    case Unary::Gelu: return fn(Gelu{s});
    case Unary::GeluTanh: return fn(GeluTanh{s});
  }
}

template <class Fn> void with_binary(Binary kind, Fn&& fn) {
  switch (kind) {
    case Binary::Add: return fn(Add{});
    case Binary::Sub: return fn(Sub{});
    case Binary::Mul: return fn(Mul{});
    case Binary::Div: return fn(Div{});
  }
}

}  // namespace qkv::math
