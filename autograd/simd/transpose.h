// A square block of floats transposed in vector registers: the packing of
// autograd/simd/gemm_tile.h, where an operand's rows must become the panel's
// k-steps. Element by element it cost 6 cycles a float (a strided store each),
// 5% of a [2048, 256]·[768, 256]ᵀ product.
//
// xsimd 8.1 has no transpose, and its zip_lo/zip_hi interleave within 128-bit
// lanes only, so each level here is written with its own intrinsics; a level
// without one (SSE2, which has no micro-kernel either) has no specialization.
// NEON's transposes are its trn1/trn2 instructions.
#pragma once

#include <xsimd/xsimd.hpp>

namespace qkv::simd::detail {
namespace {

// rows[i][j] becomes rows[j][i], for the W×W block of W = lanes rows: one overload a level.
#if XSIMD_WITH_AVX512F
inline void transpose_block(xsimd::batch<float, xsimd::avx512f>* rows) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // rows 2i and 2i+1 interleaved: lane L holds two of columns 4L..4L+3 of both
    t[2 * i] = _mm512_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + c]: rows 4g..4g+3 of column 4L + c in lane L
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {  // gather lane L of the four row groups: column 4L + c, all 16 rows
    __m512 even01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), odd01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    __m512 even23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    __m512 odd23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    rows[c] = _mm512_shuffle_f32x4(even01, even23, 0x88);
    rows[c + 4] = _mm512_shuffle_f32x4(odd01, odd23, 0x88);
    rows[c + 8] = _mm512_shuffle_f32x4(even01, even23, 0xDD);
    rows[c + 12] = _mm512_shuffle_f32x4(odd01, odd23, 0xDD);
  }
}
#endif

#if XSIMD_WITH_AVX2
inline void transpose_block(xsimd::batch<float, xsimd::fma3<xsimd::avx2>>* rows) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // u[4g + c]: rows 4g..4g+3 of column 4L + c in lane L
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    rows[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    rows[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}
#endif

#if XSIMD_WITH_NEON64
// 4 x 4: pairs of rows interleaved (trn1/trn2 of 32-bit lanes), then pairs
// of those (trn1/trn2 of 64-bit lanes).
inline void transpose_block(xsimd::batch<float, xsimd::neon64>* rows) {
  const float32x4_t t0 = vtrn1q_f32(rows[0], rows[1]), t1 = vtrn2q_f32(rows[0], rows[1]);  // a0 b0 a2 b2, a1 b1 a3 b3
  const float32x4_t t2 = vtrn1q_f32(rows[2], rows[3]), t3 = vtrn2q_f32(rows[2], rows[3]);  // c0 d0 c2 d2, c1 d1 c3 d3
  auto wide = [](float32x4_t v) { return vreinterpretq_f64_f32(v); };
  rows[0] = vreinterpretq_f32_f64(vtrn1q_f64(wide(t0), wide(t2)));  // a0 b0 c0 d0
  rows[1] = vreinterpretq_f32_f64(vtrn1q_f64(wide(t1), wide(t3)));  // a1 b1 c1 d1
  rows[2] = vreinterpretq_f32_f64(vtrn2q_f64(wide(t0), wide(t2)));  // a2 b2 c2 d2
  rows[3] = vreinterpretq_f32_f64(vtrn2q_f64(wide(t1), wide(t3)));  // a3 b3 c3 d3
}
#endif

}  // namespace
}  // namespace qkv::simd::detail
