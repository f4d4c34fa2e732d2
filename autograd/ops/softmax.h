// Softmax family along one dim, numerically stable (the row max is subtracted).
#pragma once

#include "autograd/tensor.h"

namespace qkv {

/// exp(x - max) / Σ exp(x - max) along `dim`. A row that is entirely -inf
/// (every position masked) gives zeros, where PyTorch gives NaN.
Tensor softmax(const Tensor& x, int64_t dim);
/// x - max - log Σ exp(x - max) along `dim`. An all -inf row stays -inf.
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace qkv
