// Comparing tensors in tests.
#pragma once

#include <cmath>
#include <vector>

#include "autograd/tensor.h"

namespace qkv::testing {

/// The largest |a − b| over all elements (NaN when any difference is NaN);
/// the shapes must match (callers REQUIRE it first).
inline double worst_difference(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    double d = std::fabs(x[i] - y[i]);
    if (!(d <= worst)) worst = d;  // a NaN is the worst of all
  }
  return worst;
}

}  // namespace qkv::testing
