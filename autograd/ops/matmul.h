// Matrix products through BLAS (cblas_sgemm / cblas_dgemm).
#pragma once

#include "autograd/tensor.h"

namespace qkv {

/// op(a) @ op(b) where op transposes the last two dims when its flag is set,
/// so Q·Kᵀ is matmul(q, k, false, true) with no copy. Both operands have rank
/// >= 2: [..., n, k] @ [..., k, m] -> [..., n, m]; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

/// x·Wᵀ + b, as torch.nn.functional.linear: x [..., in], weight [out, in],
/// bias [out] or undefined -> [..., out]. One op: the product adds the bias
/// as it writes the output (on a device, and where BLAS computes, the bias
/// is written first and the product added onto it: the same bits).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

/// C[n, m] = alpha·op(A)·op(B) + beta·C on raw row-major arrays with leading
/// dimensions (so a head inside [B, n, heads, d] is an operand without a
/// copy). Split over threads in fixed output tiles: the result does not
/// depend on the thread count. For kernels that build on BLAS. With `bias`
/// (m values; beta must be 0), C = alpha·op(A)·op(B) + bias on every row.
/// With `a_row_sums` (n values; trans_a only), also a_row_sums[i] = Σ_k op(A)[i, k],
/// added in k order (a linear layer's bias gradient beside its weight gradient).
template <class T> void gemm(bool trans_a, bool trans_b, int64_t n, int64_t m, int64_t k, const T* a, int64_t lda,
                             const T* b, int64_t ldb, T* c, int64_t ldc, T beta, T alpha = T(1),
                             const T* bias = nullptr, T* a_row_sums = nullptr);

}  // namespace qkv
