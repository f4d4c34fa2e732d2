// Feed-forward parts (nn/parts.h): GPT-2's GELU MLP and the gated SwiGLU,
// with SwiGLU's gate op.
#pragma once

#include <memory>

#include "nn/layers.h"
#include "nn/parts.h"

namespace qkv::nn {

/// fc2(gelu_tanh(fc1(x))), widening to 4·width in between: the "gelu" part.
class MLP : public FeedForward {
 public:
  MLP(int64_t width, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Linear> fc1, fc2;
};

/// silu(gate) ⊙ up, silu(a) = a·σ(a), for two tensors of one shape and dtype
/// (Shazeer 2020; torch: F.silu(gate) * up).
Tensor swiglu(const Tensor& gate, const Tensor& up);

/// The hidden width of a SwiGLU over `width`: 8·width/3 (its three matrices
/// hold about what the GELU MLP's two of 4·width do), rounded up to a multiple of 8.
int64_t swiglu_hidden(int64_t width);

/// down(swiglu(gate(x), up(x))), no biases (as in LLaMA): the "swiglu" part.
/// Parameters gate.weight and up.weight [hidden, width], down.weight [width, hidden].
class SwiGLU : public FeedForward {
 public:
  SwiGLU(int64_t width, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const override;
  std::shared_ptr<Linear> gate, up, down;
};

}  // namespace qkv::nn
