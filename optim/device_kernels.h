// Internal: the device kernels of the optimizers (optim/optimizer.cu), the
// math of optimizer.cpp's scalar loops (optimizer_math.h), one element per thread.
#pragma once

#include <vector>

#include "autograd/tensor.h"
#include "optim/optimizer_math.h"

namespace qkv::optim::device {

using math::AdamStep;
using math::SGDStep;

/// One parameter of sgd_steps: its tensors (buffer undefined without
/// momentum), and whether its buffer starts at this step (SGDStep::first).
struct SGDTensors {
  Tensor param, grad, buffer;
  bool first;
};
/// p -= lr·d, d = g + wd·p through the momentum buffer, for many parameters
/// in few launches (those on one device and of one dtype share them); `s`
/// but its `first` holds for all.
void sgd_steps(const SGDStep& s, const std::vector<SGDTensors>& params);

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
