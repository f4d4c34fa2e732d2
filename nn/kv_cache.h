// A key/value cache for generation (llama2.c's, in tensors): each layer keeps
// the keys and values of every position generated so far, so a new token
// costs one row of attention instead of the whole prefix again.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tensor.h"

namespace qkv::nn {

struct KVCache {
  /// Room for `batch` sequences of up to `context` positions in `layers`
  /// layers of `heads` heads of width `head_dim`, on `device` (the model's).
  KVCache(int64_t layers, int64_t batch, int64_t context, int64_t heads, int64_t head_dim, DType dtype = DType::Float32,
          Device device = Device::cpu());
  std::vector<Tensor> keys, values;  // per layer: [batch, context, heads, head_dim]
  int64_t length = 0;                // positions filled so far
  int64_t capacity() const { return keys.empty() ? 0 : keys[0].size(1); }
};

}  // namespace qkv::nn
