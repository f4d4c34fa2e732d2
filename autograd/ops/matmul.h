// Matrix products through BLAS (cblas_sgemm / cblas_dgemm).
#pragma once

#include "autograd/tensor.h"

namespace qkv {

/// op(a) @ op(b) where op transposes the last two dims when its flag is set,
/// so Q·Kᵀ is matmul(q, k, false, true) with no copy. Both operands have rank
/// >= 2: [..., n, k] @ [..., k, m] -> [..., n, m]; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace qkv
