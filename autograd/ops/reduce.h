// Reductions over one or several dims. An empty dim list reduces every dim.
// With keepdim the reduced dims stay as size 1 (as in PyTorch).
#pragma once

#include "autograd/shape.h"
#include "autograd/tensor.h"

namespace qkv {

Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Maximum values; the gradient goes to the arg-max (the first one on ties).
Tensor max(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Variance with Bessel's correction by default (torch.var): sum((x-mean)²)/(N-correction).
Tensor var(const Tensor& x, const Dims& dims = {}, bool keepdim = false, int64_t correction = 1);

/// Sums a broadcast tensor back to `shape` (the inverse of broadcasting):
/// what every broadcasting op's backward does with its gradient.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace qkv
