// Reductions over one or several dims. An empty dim list reduces every dim.
// With keepdim the reduced dims stay as size 1 (as in PyTorch).
#pragma once

#include "autograd/shape.h"
#include "autograd/tensor.h"

namespace qkv {

Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// The mean; NaN over zero elements (as torch).
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Maximum values; the gradient goes to the arg-max (the first one on ties).
Tensor max(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Variance with Bessel's correction by default (torch.var): sum((x-mean)²)/max(N-correction, 0),
/// so NaN or inf where no degree of freedom is left (as torch).
Tensor var(const Tensor& x, const Dims& dims = {}, bool keepdim = false, int64_t correction = 1);

/// The mean over each row's first lengths[b] positions: x [B, T, ...] and
/// lengths int64 [B] in [1, T] -> [B, ...]. Mean pooling over the unpadded
/// tokens of right-padded sequences.
Tensor masked_mean(const Tensor& x, const Tensor& lengths);

/// Sums a broadcast tensor back to `shape` (the inverse of broadcasting):
/// what every broadcasting op's backward does with its gradient.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace qkv
