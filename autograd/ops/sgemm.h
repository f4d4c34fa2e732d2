// qkv's own float32 matrix product, for the products large enough to share
// among threads. Internal to the library: autograd/ops/matmul.cpp calls it.
#pragma once

#include <cstdint>

namespace qkv {

/// C[n, m] = alpha·op(A) op(B) + beta·C, row-major, op(X) = Xᵀ where trans_x,
/// computed with the active vector level's micro-kernel (simd::gemm_kernel())
/// on `threads` threads (autograd/ops/sgemm.cpp says how they share it).
///
/// Every element of C is the same sum of the same products in the same order
/// (k-blocks of a fixed depth, FMAs in k order within each) whichever thread
/// computes it, so C is bit-identical for any thread count.
/// With `bias` (m values) and beta = 0, C = alpha·op(A) op(B) + bias on every
/// row: the bits of copying the bias into C first and taking beta = 1.
/// With `row_sums` (n values, and trans_a), also row_sums[i] = Σ_k op(A)[i, k],
/// added one k at a time from 0 as A is packed: the bits of a column sum of
/// the stored A, row by row, in one pass over A instead of two.
/// Returns false, and computes nothing, where the level has no micro-kernel
/// (or k = 0, or a bias with beta ≠ 0, or row sums of an untransposed A or
/// with m = 0: no column block would pack A).
bool packed_sgemm(bool trans_a, bool trans_b, int64_t n, int64_t m, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc, float beta, float alpha, int threads,
                  const float* bias = nullptr, float* row_sums = nullptr);

}  // namespace qkv
