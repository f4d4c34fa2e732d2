// AVX2 + FMA3 kernels. CMakeLists.txt compiles this file alone with
// -mavx2 -mfma; autograd/simd.cpp calls it only on a CPU that has both.
#include "autograd/simd/kernels.h"

namespace qkv::simd::detail {

Table avx2_table() { return table_for<xsimd::fma3<xsimd::avx2>>(Isa::AVX2); }

}  // namespace qkv::simd::detail
