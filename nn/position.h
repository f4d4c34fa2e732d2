// Rotary position embeddings (Su et al. 2021, RoFormer): the "rope" position
// part (nn/parts.h), which rotates each self-attention's queries and keys
// instead of adding a learned table to the input.
#pragma once

#include "autograd/tensor.h"

namespace qkv::nn {

/// x [B, n, heads, head_dim] (head_dim even) with each head's pairs
/// (x[i], x[i + head_dim/2]) rotated by the angle (offset + t)·base^(−2i/head_dim)
/// at position t: the rotate-half layout of GPT-NeoX and Hugging Face's LLaMA.
/// A query at position m and a key at n then score through m − n alone.
Tensor rope(const Tensor& x, int64_t offset = 0, double base = 10000);

}  // namespace qkv::nn
