// Matrix products on a CUDA device (cuBLAS), row-major like the CPU's gemm():
// C_i = alpha·op(A_i)·op(B_i) + beta·C_i for i < batch, the i-th operands
// `stride` elements apart (stride 0 broadcasts one operand to every product).
// Pointers are memory of CUDA device `device`. No CUDA header needed.
#pragma once

#include <cstdint>

namespace qkv::cuda {

template <class T> void gemm_strided(int device, bool trans_a, bool trans_b, int64_t n, int64_t m, int64_t k,
                                     const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb,
                                     int64_t stride_b, T* c, int64_t ldc, int64_t stride_c, int64_t batch, T beta,
                                     T alpha = T(1));

}  // namespace qkv::cuda
