// Internal: the device kernels of nn's fused layers (nn/normalization.cu,
// nn/loss.cu), called by the layers for tensors that are not on the CPU
// after their own checks. Outputs come allocated on the inputs' device.
#pragma once

#include "autograd/tensor.h"

namespace qkv::nn::device {

/// y = LayerNorm(x) over rows of C; stats (float64 [rows, 2]) gets μ and 1/σ per row.
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                const Tensor& stats);
/// gx, and gw, gb (either may be undefined) from g and the forward's stats.
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& stats, const Tensor& g, const Tensor& gx,
                         const Tensor& gw, const Tensor& gb);

/// Per row r of logits [rows, C]: lse[r] (float64) and loss = scale·Σ_r (lse[r] - x[r, t[r]])
/// over rows whose target is not ignore_index, summed in row order into the 0-d loss.
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double scale, const Tensor& lse,
                   const Tensor& loss);
/// gx = g·scale·(softmax(x) - onehot(t)) on kept rows, 0 on ignored ones; g is the 0-d upstream gradient.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double scale,
                            const Tensor& lse, const Tensor& g, const Tensor& gx);

}  // namespace qkv::nn::device
