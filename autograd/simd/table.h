// The entry points of one instruction set's vector kernels (autograd/simd.h
// says what each computes). Each level's table is built in its own
// translation unit, compiled for that level alone (autograd/simd/*.cpp), so
// one binary carries every level and autograd/simd.cpp picks one at run time
// from what the CPU has: PyTorch's CPU_CAPABILITY pattern.
#pragma once

#include <cstdint>

#include "autograd/simd.h"

namespace qkv::simd::detail {

struct Table {
  Isa isa;
  void (*exp)(const float*, float*, int64_t);
  void (*tanh)(const float*, float*, int64_t);
  void (*sigmoid)(const float*, float*, int64_t);
  void (*gelu_tanh)(const float*, float*, int64_t);
  void (*gelu_tanh_backward)(const float*, const float*, float*, int64_t);
  double (*sum)(const float*, int64_t);
  double (*dot)(const float*, const float*, int64_t);
  float (*max)(const float*, int64_t);
  double (*exp_shifted_sum)(const float*, float, float*, int64_t);
  void (*exp_shifted_scaled)(const float*, float, float, float*, int64_t);
  void (*scale)(float*, float, int64_t);
  void (*scale_by_double)(float*, double, int64_t);
  void (*add_inplace)(float*, const float*, int64_t);
  void (*softmax_backward_row)(const float*, const float*, float*, int64_t);
  void (*layer_norm_row)(const float*, float, float, const float*, const float*, float*, int64_t);
  void (*row_moments)(const float*, int64_t, double, double&, double&);
  void (*layer_norm_backward_row)(const float*, const float*, const float*, float, float, float*, int64_t);
  void (*layer_norm_param_grads)(const float*, const float*, float, float, float*, float*, int64_t);
  void (*adam)(const AdamStep&, float*, const float*, float*, float*, int64_t);
  // The product's micro-kernel and its tile (gemm_mr = 0: this level has none, BLAS computes).
  int gemm_mr, gemm_nr;
  void (*gemm_tile)(const GemmTileArgs&);
  void (*gemm_pack_a)(const GemmPackArgs&);
  void (*gemm_pack_b)(const GemmPackArgs&);
};

/// The build's baseline: SSE2 on x86-64, NEON on aarch64.
Table baseline_table();
#if defined(__x86_64__)
/// AVX2 with FMA3, and AVX-512 (F, with FMA): call only on a CPU that has them.
Table avx2_table();
Table avx512_table();
#endif

}  // namespace qkv::simd::detail
