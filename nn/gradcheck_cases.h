// Gradient-check cases of the differentiable ops defined in nn/ (layer_norm,
// dropout, cross_entropy); the registry in autograd/ includes them.
#pragma once

#include <vector>

#include "autograd/gradcheck_registry.h"

namespace qkv::nn {

std::vector<GradcheckCase> gradcheck_cases();

}  // namespace qkv::nn
