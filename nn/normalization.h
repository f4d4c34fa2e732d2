// Normalisation: layer norm and RMS norm, each an op and a module (a Norm part, nn/parts.h).
#pragma once

#include "nn/parts.h"

namespace qkv::nn {

/// (x - mean) / sqrt(var + eps) over the last dim (biased variance, as in
/// torch), then · weight + bias when they are defined ([C] each).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

/// LayerNorm over the last dim of size `dim`; weight starts at 1, bias at 0.
class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const override;
  Tensor weight, bias;  // undefined when not affine

 private:
  int64_t dim_;
  double eps_;
};

/// x / sqrt(mean(x²) + eps) over the last dim, then · weight ([C]) when it is
/// defined (Zhang & Sennrich 2019; torch.nn.functional.rms_norm). No mean is
/// taken off and there is no bias.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

/// RMSNorm over the last dim of size `dim`; weight starts at 1. The "rmsnorm"
/// norm part. eps 1e-6 as in LLaMA (torch.nn.RMSNorm's default is the dtype's epsilon).
class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) const override;
  Tensor weight;

 private:
  int64_t dim_;
  double eps_;
};

}  // namespace qkv::nn
