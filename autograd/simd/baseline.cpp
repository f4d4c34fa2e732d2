// The baseline level's kernels, compiled with the build's own flags: SSE2
// on x86-64 (x86-64-v2), NEON on aarch64 (Advanced SIMD, which the AArch64
// architecture requires: 32 128-bit registers, with fused multiply-adds).
#include "autograd/simd/kernels.h"

namespace qkv::simd::detail {

#if XSIMD_WITH_SSE2
Table baseline_table() { return table_for<xsimd::sse2>(Isa::SSE2); }
#elif XSIMD_WITH_NEON64
Table baseline_table() { return table_for<xsimd::neon64>(Isa::NEON); }
#else
#error "qkv's vector kernels are written for x86-64 (SSE2 and up) and aarch64 (NEON)"
#endif

}  // namespace qkv::simd::detail
