// Internal: the device kernels of the optimizers (optim/optimizer.cu), the
// math of optimizer.cpp's scalar loops (optimizer_math.h), one element per thread.
#pragma once

#include <vector>

#include "autograd/tensor.h"
#include "optim/optimizer_math.h"

namespace qkv::optim::device {

using math::AdamStep;
using math::SGDStep;

/// p -= lr·d, d = g + wd·p through the momentum buffer (undefined without momentum).
void sgd_step(const SGDStep& s, const Tensor& param, const Tensor& grad, const Tensor& buffer);

/// One parameter of adam_steps: its tensors, and its AdamStep::shrink.
struct AdamTensors {
  Tensor param, grad, m, v;
  double shrink;
};
/// Adam steps of many parameters in few launches (those on one device and
/// of one dtype share them); `s` but its shrink holds for all.
void adam_steps(const AdamStep& s, const std::vector<AdamTensors>& params);

/// Σ g² over blocks of `block` elements, one partial sum each, into `out`
/// (float64, on the gradients' device): each gradient's blocks in turn.
void squared_block_sums(const std::vector<Tensor>& grads, int64_t block, const Tensor& out);
/// g *= factor for every gradient, in few launches.
void scale(const std::vector<Tensor>& grads, double factor);

}  // namespace qkv::optim::device
