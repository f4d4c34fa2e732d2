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

/// cross_entropy(x·weightᵀ, targets, ...): a linear head without bias
/// (weight [V, C], e.g. a GPT's tied token embedding) and the loss over its V
/// classes in one op, for x [..., C] and targets [...]. The logits are made a
/// block of rows at a time, at most `max_logits` values at once (equal blocks,
/// so the bits depend on the sizes alone, never on the thread count), and
/// each block's gradient into its logits is made in the same pass: the
/// B·T·V logits and their gradient are never held whole (at GPT-2's
/// vocabulary and T = 1024, 206 MB each). The gradients of x and weight are
/// made in the forward (as Liger Kernel's fused linear cross-entropy does)
/// and scaled by the output's gradient in backward. Where all the logits
/// fit in one block, the values are the composed ops' to the bit. On a
/// device: the composed ops.
constexpr int64_t kHeadLossBlock = int64_t{1} << 24;  // linear_cross_entropy's logits at once (64 MiB of float32)
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                            Reduction reduction = Reduction::Mean, int64_t max_logits = kHeadLossBlock);

/// The mean entropy −Σ_j p_j·log(p_j + 1e-12) of attention weight rows,
/// averaged over every row of every tensor given (each [..., n_q, n_k], e.g.
/// one per layer with heads inside): the attention-entropy regulariser. Added
/// to a loss with weight λ: λ < 0 rewards spread-out attention, λ > 0 sharp
/// attention. Fully masked rows (all zeros) count as entropy 0. The 1e-12
/// keeps log finite at p = 0; it shifts the value by at most n_k·1e-12.
Tensor attention_entropy(const std::vector<Tensor>& weights);

}  // namespace qkv::nn
