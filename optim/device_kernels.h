// Internal: the device kernels of the optimizers (optim/optimizer.cu), the
// math of optimizer.cpp's scalar loops (optimizer_math.h), one element per thread.
#pragma once

#include "autograd/tensor.h"
#include "optim/optimizer_math.h"

namespace qkv::optim::device {

using math::AdamStep;
using math::SGDStep;

/// p -= lr·d, d = g + wd·p through the momentum buffer (undefined without momentum).
void sgd_step(const SGDStep& s, const Tensor& param, const Tensor& grad, const Tensor& buffer);

void adam_step(const AdamStep& s, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v);

/// Σ g² over blocks of `block` elements, one partial sum each, into
/// out[at, at + blocks) (float64, on grad's device).
void squared_block_sums(const Tensor& grad, int64_t block, const Tensor& out, int64_t at);
/// g *= factor
void scale(const Tensor& grad, double factor);

}  // namespace qkv::optim::device
