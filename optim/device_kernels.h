// Internal: the device kernels of the optimizers (optim/optimizer.cu), the
// float64 arithmetic of optimizer.cpp's scalar loops, one element per thread.
#pragma once

#include "autograd/tensor.h"

namespace qkv::optim::device {

struct SGDStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first;  // first: the momentum buffer starts as the step
};
/// p -= lr·d, d = g + wd·p through the momentum buffer (undefined without momentum).
void sgd_step(const SGDStep& s, const Tensor& param, const Tensor& grad, const Tensor& buffer);

struct AdamStep {
  double lr, beta1, beta2, eps, l2, shrink, bias_correction1, bias_correction2;
};
void adam_step(const AdamStep& s, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v);

/// Σ g² over blocks of `block` elements, one partial sum each (float64 [blocks]).
Tensor squared_block_sums(const Tensor& grad, int64_t block);
/// g *= factor
void scale(const Tensor& grad, double factor);

}  // namespace qkv::optim::device
