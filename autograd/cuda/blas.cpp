// cuBLAS behind the same row-major gemm() the CPU ops call
// (autograd/ops/matmul.h): one handle per device, float32 computed in
// float32 (CUBLAS_COMPUTE_32F: never TF32 unless asked), float64 in float64.
#include <cublas_v2.h>

#include <mutex>
#include <vector>

#include "autograd/cuda/backend.h"
#include "autograd/cuda/gemm.h"
#include "autograd/cuda/runtime.h"

namespace qkv::cuda {

void check_blas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(cat("cuBLAS: ", what, ": ", cublasGetStatusString(status)));
}

namespace {
// cuBLAS allocates device memory of its own (its workspace, when a handle is made and when a call needs
// more): out of memory there, the allocator's cache goes back to the driver and the call is made once
// more, as for a tensor's own block. (Without it, a device full of cached blocks failed every product.)
template <class Call> void call_blas(int device, const char* what, Call call) {
  cublasStatus_t status = call();
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    release_cache(device);
    status = call();
  }
  check_blas(status, what);
}
}  // namespace

cublasHandle_t blas() {
  static std::mutex mutex;
  static std::vector<cublasHandle_t> handles;  // by device; the handles are never destroyed (see backend())
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(handles.size()) <= device) handles.resize(device + 1, nullptr);
  if (!handles[device]) {
    call_blas(device, "cublasCreate", [&] { return cublasCreate(&handles[device]); });
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
  cublasHandle_t handle = blas();
  call_blas(device, "cublasGemmStridedBatchedEx", [&] {
    return cublasGemmStridedBatchedEx(handle, op_b, op_a, m, n, k, &alpha, b, type, ldb, stride_b, a, type, lda,
                                      stride_a, &beta, c, type, ldc, stride_c, batch, compute, CUBLAS_GEMM_DEFAULT);
  });
}
template void gemm_strided<float>(int, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                                  const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t, float, float);
template void gemm_strided<double>(int, bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, int64_t,
                                   const double*, int64_t, int64_t, double*, int64_t, int64_t, int64_t, double, double);

}  // namespace qkv::cuda
