// cuBLAS behind the same row-major gemm() the CPU ops call
// (autograd/ops/matmul.h): one handle per device, float32 computed in
// float32 (CUBLAS_COMPUTE_32F: never TF32 unless asked), float64 in float64.
#include <cublas_v2.h>

#include <mutex>
#include <vector>

#include "autograd/cuda/gemm.h"
#include "autograd/cuda/runtime.h"

namespace qkv::cuda {

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(cat("cuBLAS: ", what, ": ", cublasGetStatusString(status)));
}

cublasHandle_t blas() {
  static std::mutex mutex;
  static std::vector<cublasHandle_t> handles;  // by device; the handles are never destroyed (see backend())
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(handles.size()) <= device) handles.resize(device + 1, nullptr);
  if (!handles[device]) {
    check_blas(cublasCreate(&handles[device]), "cublasCreate");
    check_blas(cublasSetMathMode(handles[device], CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  return handles[device];
}

// Row-major C = α·op(A)·op(B) + β·C is column-major Cᵀ = α·op(B)ᵀ·op(A)ᵀ + β·Cᵀ:
// the same buffers, operands swapped, n and m swapped.
template <class T> void gemm_strided(int device, bool ta, bool tb, int64_t n, int64_t m, int64_t k, const T* a,
                                     int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T* c,
                                     int64_t ldc, int64_t stride_c, int64_t batch, T beta, T alpha) {
  if (n == 0 || m == 0 || batch == 0) return;
  for (int64_t v : {n, m, k, lda, ldb, ldc, batch})  // cuBLAS takes int sizes
    QKV_CHECK(v <= INT32_MAX, "matmul on cuda:", device, ": a size of ", v, " is beyond cuBLAS's int range");
  DeviceGuard on(device);
  constexpr cudaDataType_t type = sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_64F;
  constexpr cublasComputeType_t compute = sizeof(T) == 4 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F;
  cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_blas(cublasGemmStridedBatchedEx(blas(), op_b, op_a, m, n, k, &alpha, b, type, ldb, stride_b, a, type, lda,
                                        stride_a, &beta, c, type, ldc, stride_c, batch, compute, CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx");
}
template void gemm_strided<float>(int, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                                  const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t, float, float);
template void gemm_strided<double>(int, bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, int64_t,
                                   const double*, int64_t, int64_t, double*, int64_t, int64_t, int64_t, double, double);

}  // namespace qkv::cuda
