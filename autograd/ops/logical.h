// Logic on bool tensors (masks) and comparisons that make them. None of these
// is differentiable: their results never require grad.
#pragma once

#include "autograd/tensor.h"

namespace qkv {

Tensor logical_not(const Tensor& mask);
/// Both broadcast (NumPy rules).
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

/// x < value, elementwise, for float and int64 tensors.
Tensor less(const Tensor& x, double value);
/// x == value, elementwise, for float and int64 tensors.
Tensor equal(const Tensor& x, double value);

}  // namespace qkv
