// What CUDA kernels and their launchers share: error checks, the current
// device, launch sizes and cuBLAS. Included by the backend's own files and
// the ops' .cu files only (it includes CUDA's headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "autograd/tensor.h"

namespace qkv::cuda {

/// Throws a one-line qkv::Error naming `what` unless `status` is success.
void check(cudaError_t status, const char* what);
void check_blas(cublasStatus_t status, const char* what);
/// Throws when the last kernel launch failed (bad configuration, no kernel
/// image for this GPU); launch errors are otherwise silent.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

/// Makes device `index` current for its scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

/// The cuBLAS handle of the current device (made on first use, on the
/// legacy default stream like every kernel here).
cublasHandle_t blas();

constexpr int kThreads = 256;
/// Blocks of kThreads for n elements (grid-stride loops cover the rest).
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace qkv::cuda
