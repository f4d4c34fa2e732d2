// What several test files make and check with: token ids, float64 leaves,
// infinity, and a module's float64 gradient check. (One definition each: the
// sanitizer pass compiles test files together, as a unity build.)
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/tensor.h"
#include "nn/module.h"

namespace qkv::testing {

inline constexpr double inf = std::numeric_limits<double>::infinity();

/// Token ids: an int64 tensor from a list, shaped.
inline Tensor ids(std::vector<int64_t> values, Shape shape) { return Tensor::from_vector(values, shape); }

/// A float64 leaf of normal draws that requires its gradient.
inline Tensor leaf64(const Shape& shape) { return Tensor::randn(shape, DType::Float64).requires_grad_(); }

/// Gradient check of a module's parameters (and extra leaves) in float64.
inline GradcheckResult check_module(const nn::Module& m, std::vector<std::pair<std::string, Tensor>> extra,
                                    const std::function<Tensor()>& f) {
  auto leaves = m.named_parameters();
  leaves.insert(leaves.end(), extra.begin(), extra.end());
  return gradcheck_leaves(f, leaves);
}

}  // namespace qkv::testing
