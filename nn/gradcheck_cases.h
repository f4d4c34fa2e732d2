// Gradient-check cases of the differentiable ops defined in nn/ (layer_norm,
// dropout, cross_entropy). nn registers them into autograd's registry
// through register_gradcheck_case, as any layer outside the library does:
// autograd never includes nn.
#pragma once

#include <vector>

#include "autograd/gradcheck_registry.h"

namespace qkv::nn {

/// nn's cases, built fresh.
std::vector<GradcheckCase> gradcheck_cases();

/// Adds nn's cases to gradcheck_registry(), once (later calls do nothing).
/// A static library keeps no self-registering object nobody refers to, so
/// whoever walks the registry calls this first (the registry test does; a
/// declared op without cases fails it).
void register_gradcheck_cases();

}  // namespace qkv::nn
