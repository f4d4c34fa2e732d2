// Layer normalisation: the functional op and the module.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

/// (x - mean) / sqrt(var + eps) over the last dim (biased variance, as in
/// torch), then · weight + bias when they are defined ([C] each).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

/// LayerNorm over the last dim of size `dim`; weight starts at 1, bias at 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight, bias;  // undefined when not affine

 private:
  int64_t dim_;
  double eps_;
};

}  // namespace qkv::nn
