// Losses.
#pragma once

#include "autograd/tensor.h"

namespace qkv::nn {

enum class Reduction { Mean, Sum };

/// Cross-entropy of logits [..., C] against int64 class targets [...] (the
/// logits' shape without its last dim), fused with log_softmax for
/// stability. Targets equal to ignore_index count neither in the loss nor in
/// the mean's denominator. With Mean and every target ignored the loss is 0
/// with zero gradient (PyTorch gives NaN).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

}  // namespace qkv::nn
