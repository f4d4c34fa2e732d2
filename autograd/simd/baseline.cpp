// The baseline level's kernels, compiled with the build's own flags
// (x86-64-v2 on x86-64): SSE2 vectors there, the build's own
// vector unit (e.g. NEON) elsewhere, named sse2 either way.
#include "autograd/simd/kernels.h"

namespace qkv::simd::detail {

#if XSIMD_WITH_SSE2
Table baseline_table() { return table_for<xsimd::sse2>(Isa::SSE2); }
#else
Table baseline_table() { return table_for<xsimd::default_arch>(Isa::SSE2); }
#endif

}  // namespace qkv::simd::detail
