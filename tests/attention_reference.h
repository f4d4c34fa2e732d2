// What the fused attention kernel is checked against, on any device: the
// composed path it replaces, and how far apart two results are. Used by
// tests/test_fused_attention.cpp (CPU) and tests/cuda/test_cuda.cpp (GPU).
#pragma once

#include <cmath>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops/attention.h"
#include "nn/nn.h"

namespace qkv::testing {

// The composed reference for fused_attention's [B, n, H, d] layout, on q's device.
inline Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& m) {
  auto heads = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };
  Tensor mask = m.mask;
  if (m.key_padding.defined()) mask = nn::merge_masks(mask, reshape(m.key_padding, {m.key_padding.size(0), 1, 1, -1}));
  if (m.causal) mask = nn::merge_masks(mask, nn::causal_mask(q.size(1), k.size(1)).to(q.device()));
  return permute(nn::scaled_dot_product_attention(heads(q), heads(k), heads(v), mask).output, {0, 2, 1, 3});
}

// The largest |got − want| − rtol·|want| over the elements (a NaN is the worst of all): within
// atol + rtol·|want| everywhere when it is at most atol.
inline double worst_excess(const Tensor& got, const Tensor& want, double rtol) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double excess = std::fabs(g[i] - w[i]) - rtol * std::fabs(w[i]);
    if (!(excess <= worst)) worst = excess;
  }
  return worst;
}

}  // namespace qkv::testing
