// Elementwise ops. Binary ops broadcast by NumPy rules; their backward sums
// each gradient back to its input's shape. Both operands must share a dtype.
#pragma once

#include "autograd/tensor.h"

namespace qkv {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& a, double s);  // a + s
Tensor sub(const Tensor& a, double s);  // a - s
Tensor sub(double s, const Tensor& a);  // s - a
Tensor mul(const Tensor& a, double s);  // a * s
Tensor div(const Tensor& a, double s);  // a / s
Tensor div(double s, const Tensor& a);  // s / a

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
/// x·Φ(x), Φ the standard normal CDF (exact GELU, torch's approximate='none').
Tensor gelu(const Tensor& x);
/// 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) (torch's approximate='tanh', GPT-2's).
Tensor gelu_tanh(const Tensor& x);
/// |x|; its gradient at 0 is 0, as in PyTorch.
Tensor abs(const Tensor& x);
/// A differentiable copy with its own storage.
Tensor clone(const Tensor& x);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return sub(s, a); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return div(s, a); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace qkv
