// Vectorised float32 kernels over raw arrays, through xsimd (Debian's
// libxsimd-dev): one vector type, one template per kernel, instantiated for
// every instruction set the build can emit and chosen at run time from what
// the CPU has. Op files call these for float32; the float64 path stays
// scalar and is the reference the tests measure these against.
//
// The choice can be forced (tests run every kernel under each instruction
// set; users can set QKV_SIMD=sse2|avx2|avx512 on x86-64, neon on aarch64,
// before starting).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::simd {

/// The levels: x86-64's three (every x86-64 CPU has SSE2), and aarch64's
/// one (every aarch64 CPU has NEON, its Advanced SIMD; SVE, where present,
/// is noted by cpu::features but not used).
enum class Isa { SSE2, AVX2, AVX512, NEON };

/// The instruction set the kernels use now.
Isa active_isa();
const char* isa_name(Isa isa);
/// Instruction sets that are compiled in and that this CPU runs, lowest first.
std::vector<Isa> available_isas();
/// Makes the kernels use `isa` (which must be available); throws otherwise.
void force_isa(Isa isa);
/// Parses "sse2", "avx2", "avx512" or "neon"; throws on anything else.
Isa parse_isa(const std::string& name);

// ---- elementwise maps: y may equal x ----
void exp(const float* x, float* y, int64_t n);
void tanh(const float* x, float* y, int64_t n);
/// 1 / (1 + e^-x)
void sigmoid(const float* x, float* y, int64_t n);
/// 0.5·x·(1 + tanh(u)), u = √(2/π)(x + 0.044715x³), computed as x·σ(2u) (no cancellation for x < 0).
void gelu_tanh(const float* x, float* y, int64_t n);
/// gx = g · (0.5(1 + t) + 0.5·x·(1 − t²)·u'), t = tanh(u), from x alone (one pass).
void gelu_tanh_backward(const float* x, const float* g, float* gx, int64_t n);

// ---- reductions (float lanes, returned as double) ----
double sum(const float* x, int64_t n);
double dot(const float* a, const float* b, int64_t n);
/// The largest element; NaN if any element is NaN (so softmax propagates it).
float max(const float* x, int64_t n);

// ---- row kernels ----
/// y = exp(x - shift); returns Σ y.
double exp_shifted_sum(const float* x, float shift, float* y, int64_t n);
/// y = scale · exp(x - shift).
void exp_shifted_scaled(const float* x, float shift, float scale, float* y, int64_t n);
/// y *= s
void scale(float* y, float s, int64_t n);
/// y = float(double(y) · s): the bits of that scalar expression (vectorized by
/// the compiler in Release builds).
void scale_by_double(float* y, double s, int64_t n);
/// acc += x
void add_inplace(float* acc, const float* x, int64_t n);
/// gx = y ⊙ (g − Σ g⊙y): softmax's backward along one row.
void softmax_backward_row(const float* y, const float* g, float* gx, int64_t n);
/// y = (x − mu)·rstd·w + b (w, b may be null: 1 and 0).
void layer_norm_row(const float* x, float mu, float rstd, const float* w, const float* b, float* y, int64_t n);
/// Returns the row's mean and rstd = 1/√(var + eps), both computed in two passes.
void row_moments(const float* x, int64_t n, double eps, double& mu, double& rstd);
/// dx = rstd·(d − mean(d) − x̂·mean(d⊙x̂)), d = g⊙w, x̂ = (x − mu)·rstd.
void layer_norm_backward_row(const float* x, const float* g, const float* w, float mu, float rstd, float* gx,
                             int64_t n);
/// gw += g⊙x̂ and gb += g for one row, over columns [0, n) (either may be null).
void layer_norm_param_grads(const float* x, const float* g, float mu, float rstd, float* gw, float* gb, int64_t n);

/// One Adam/AdamW step over n elements, in float lanes:
///   d = g + l2·p; m = β1·m + (1−β1)·d; v = β2·v + (1−β2)·d²;
///   p = p·shrink − lr·(m·inv_bc1) / (√(v·inv_bc2) + eps)
/// Every coefficient is computed in double by the caller, then rounded once
/// (1 − 0.999 rounded from a float β2 would be 1.3e-5 off).
struct AdamStep {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, l2, shrink, lr, inv_bc1, inv_bc2, eps;
};
void adam(const AdamStep& s, float* p, const float* g, float* m, float* v, int64_t n);

// ---- the float32 matrix product's micro-kernel (autograd/ops/sgemm.cpp drives it) ----
/// One call: a tile of at most mr × nr of C from packed panels of A and B
/// (autograd/simd/gemm_tile.h gives the math).
struct GemmTileArgs {
  int64_t kc;               // depth of this k-block
  const float* a;           // packed A panel: kc groups of mr values
  const float* b;           // packed B panel: kc groups of nr values, 64-byte aligned
  float* c;                 // the tile's first element in C (row-major, leading dimension ldc)
  int64_t ldc, rows, cols;  // rows <= mr and cols <= nr of the tile are real
  float alpha, beta;
  bool first;         // the first k-block: c = alpha·acc + beta·c (or + bias); later ones add alpha·acc
  const float* bias;  // or null: the tile's columns of a row added to every row in the first k-block (beta = 0)
};

/// Packing panels [begin, end) of op(X) for the micro-kernel, at depth [p0, p0 + kc):
/// A's row panels (mr rows from row `first` of the block) or B's column panels (nr columns).
struct GemmPackArgs {
  bool trans;      // op(X) = Xᵀ
  const float* x;  // the stored operand, row-major, leading dimension ld
  int64_t ld;
  int64_t first, size;  // the block's rows of op(A) (or columns of op(B)): [first, first + size)
  int64_t p0, kc;
  int64_t begin, end;  // panels to pack; panel p goes to out + (p − begin)·(mr or nr)·kc
  float* out;
  float* sums = nullptr;  // or (pack_a of a transposed A) sums[r] += op(A)(first + r, k) for the packed rows,
                          // k in order: a product's row sums in its own pass over A (linear's bias gradient)
};

/// The active level's micro-kernel: tile rows mr and columns nr (mr = 0 where the
/// level has none and BLAS computes the products: SSE2, which lacks FMA).
/// pack_a and pack_b lay A's and B's panels out as tile() reads them (k-major, zero
/// past the last row or column).
struct GemmKernel {
  int mr = 0, nr = 0;
  void (*tile)(const GemmTileArgs&) = nullptr;
  void (*pack_a)(const GemmPackArgs&) = nullptr;
  void (*pack_b)(const GemmPackArgs&) = nullptr;
};
GemmKernel gemm_kernel();

}  // namespace qkv::simd
