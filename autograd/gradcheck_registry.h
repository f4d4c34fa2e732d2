// The registry of gradient checks: every differentiable op (and later every
// layer) with a way to build random float64 inputs. tests/test_gradcheck_registry.cpp
// walks it; code outside the library may add its own cases.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"

namespace qkv {

struct GradcheckCase {
  std::string op;                                              // the declared op (or layer) the case covers
  std::string label;                                           // what it exercises, e.g. "broadcast [3,1] + [4]"
  std::function<std::vector<Tensor>(Generator&)> make_inputs;  // float64 (+ int64/bool) inputs
  TensorFn fn;
  GradcheckOptions options = {};
};

/// All registered cases: autograd's ops, then those added with
/// register_gradcheck_case (nn's ops: nn::register_gradcheck_cases()).
std::vector<GradcheckCase>& gradcheck_registry();

/// Adds a case (a custom layer registers itself this way).
void register_gradcheck_case(GradcheckCase c);

}  // namespace qkv
