// Internal: the device kernels of nn's fused layers (nn/normalization.cu,
// nn/loss.cu), called by the layers for tensors that are not on the CPU
// after their own checks. Outputs come allocated on the inputs' device.
#pragma once

#include "autograd/device_faults.h"
#include "autograd/tensor.h"

namespace qkv::nn::device {

/// y = LayerNorm(x) over rows of C; stats (float64 [rows, 2]) gets μ and 1/σ per row.
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& stats);
/// gx, and gw, gb (either may be undefined) from g and the forward's stats.
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g, const Tensor& gx,
                         const Tensor& gw, const Tensor& gb);

/// Per row r of logits [rows, C]: lse[r] (float64) and loss = scale·Σ_r (lse[r] - x[r, t[r]])
/// over rows whose target is not ignore_index, into the 0-d loss; scale (float64 [1]) is
/// 1/(rows counted) for the mean (0 for none), else 1. A target that is neither
/// ignore_index nor a class is reported to `fault`, and its row is not counted.
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, bool mean,
                   const FaultReport& fault, const Tensor& lse, const Tensor& scale, const Tensor& loss);
/// gx = g·scale·(softmax(x) - onehot(t)) on counted rows, 0 on others; g is the 0-d upstream gradient.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& scale,
                            const Tensor& lse, const Tensor& g, const Tensor& gx);

}  // namespace qkv::nn::device
