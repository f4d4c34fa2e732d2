// Inverted dropout: the functional op and the module.
#pragma once

#include "autograd/generator.h"
#include "nn/module.h"

namespace qkv::nn {

/// Zeroes each element with probability p and scales the kept ones by
/// 1/(1-p), so the expectation is unchanged. The identity when not training
/// or p = 0; all zeros when p = 1. The mask comes from `gen` (the default
/// generator when null), so the same generator state replays the same mask.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

class Dropout : public Module {
 public:
  explicit Dropout(double p, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const { return dropout(x, p_, is_training(), gen_); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

}  // namespace qkv::nn
