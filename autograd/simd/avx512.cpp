// AVX-512 kernels (512-bit float lanes, with the fused multiply-adds that
// kernels.h supplies). CMakeLists.txt compiles this file alone with
// -mavx512f -mavx512dq -mfma (xsimd 8.1's avx512f sums lanes with a DQ
// instruction); autograd/simd.cpp calls it only on a CPU that has AVX-512F
// and DQ (every AVX-512 CPU but Xeon Phi) and an OS that saves its registers.
#include "autograd/simd/kernels.h"

namespace qkv::simd::detail {

Table avx512_table() { return table_for<xsimd::avx512f>(Isa::AVX512); }

}  // namespace qkv::simd::detail
