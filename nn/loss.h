// Losses.
#pragma once

#include <vector>

#include "autograd/tensor.h"

namespace qkv::nn {

enum class Reduction { Mean, Sum };

/// Cross-entropy of logits [..., C] against int64 class targets [...] (the
/// logits' shape without its last dim), fused with log_softmax for
/// stability. Targets equal to ignore_index count neither in the loss nor in
/// the mean's denominator. With Mean and every target ignored the loss is 0
/// with zero gradient (PyTorch gives NaN). A target that is neither a class
/// nor ignore_index is a one-line error: at once on the CPU; on a device, at
/// the next read from it (autograd/device_faults.h).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

/// The mean entropy −Σ_j p_j·log(p_j + 1e-12) of attention weight rows,
/// averaged over every row of every tensor given (each [..., n_q, n_k], e.g.
/// one per layer with heads inside): the attention-entropy regulariser. Added
/// to a loss with weight λ: λ < 0 rewards spread-out attention, λ > 0 sharp
/// attention. Fully masked rows (all zeros) count as entropy 0. The 1e-12
/// keeps log finite at p = 0; it shifts the value by at most n_k·1e-12.
Tensor attention_entropy(const std::vector<Tensor>& weights);

}  // namespace qkv::nn
