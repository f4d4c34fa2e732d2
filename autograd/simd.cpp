// Run-time dispatch of the vector kernels: one table per instruction set,
// each built in its own translation unit (autograd/simd/), and the best one
// this CPU runs chosen at first use, or the one QKV_SIMD names.
#include "autograd/simd.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "autograd/cpu.h"
#include "autograd/error.h"
#include "autograd/simd/table.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace qkv::simd {

using detail::Table;

namespace {

// Every level compiled in and run by this CPU, lowest first. Every x86-64
// build carries all three; the CPU decides (GCC's cpuid test also checks that
// the OS saves the AVX and AVX-512 registers). An aarch64 build carries NEON,
// which every aarch64 CPU has (the baseline).
std::vector<Table> usable_tables() {
  std::vector<Table> tables{detail::baseline_table()};
#if defined(__x86_64__)
  const cpu::Features f = cpu::features();
  if (f.avx2 && f.fma) tables.push_back(detail::avx2_table());
  if (f.avx512f && f.avx512dq && f.fma) tables.push_back(detail::avx512_table());
#endif
  return tables;
}

const std::vector<Table>& tables() {
  static const std::vector<Table> all = usable_tables();
  return all;
}

const Table* select(Isa isa) {
  for (const Table& t : tables())
    if (t.isa == isa) return &t;
  return nullptr;
}

// "sse2, avx2": the levels this CPU runs, for error messages.
std::string cpu_levels() {
  std::string out;
  for (const Table& t : tables()) out += (out.empty() ? "" : ", ") + std::string(isa_name(t.isa));
  return out;
}

// The best level, unless QKV_SIMD names one (a name that is not a level, or
// a level this CPU lacks, is an error rather than a silent fallback).
const Table* initial() {
  const char* env = std::getenv("QKV_SIMD");
  if (!env || !*env) return &tables().back();
  std::string name(env, strnlen(env, 16));
  Isa isa{};
  try {
    isa = parse_isa(name);
  } catch (const Error&) {
    throw Error(
        cat("QKV_SIMD='", printable(name),
            "' is not an instruction set (sse2, avx2 or avx512 on x86-64, neon on aarch64; unset it for the best)"));
  }
  const Table* forced = select(isa);
  QKV_CHECK(forced, "QKV_SIMD=", name, ": this CPU lacks that instruction set (it has ", cpu_levels(), ")");
  return forced;
}

const Table*& current() {
  static const Table* t = initial();
  return t;
}

// The kernels' files are built without AddressSanitizer (CMakeLists.txt says why): each call is checked
// here instead, over every value its contract lets it read or write. A region that is not wholly
// addressable is reported by ASan itself, with this call's stack, through a checked read of its first
// bad byte.
template <class T> void check_values(const T* p, int64_t count) {
#if defined(__SANITIZE_ADDRESS__)
  if (!p || count <= 0) return;  // an absent optional operand, or nothing to touch
  if (const void* bad = __asan_region_is_poisoned(const_cast<T*>(p), static_cast<size_t>(count) * sizeof(T)))
    (void)*static_cast<const volatile char*>(bad);
#else
  (void)p, (void)count;
#endif
}

#if defined(__SANITIZE_ADDRESS__)
// A tile reads its kc-deep panels and the rows × cols of C it writes (and reads, after the first
// k-block), and the bias's cols.
void checked_tile(const GemmTileArgs& t) {
  const Table* k = current();
  check_values(t.a, t.kc * k->gemm_mr);
  check_values(t.b, t.kc * k->gemm_nr);
  for (int64_t r = 0; r < t.rows; ++r) check_values(t.c + r * t.ldc, t.cols);
  check_values(t.bias, t.cols);
  k->gemm_tile(t);
}

// Packing writes (end − begin) panels of `width`·kc values, and reads the operand's stored rows: one row
// of kc values per packed row or column (stored [rows, k]), or, stored k-major, one run of the packed
// columns per k-step (with its row sums, for a transposed A).
void check_pack(const GemmPackArgs& g, int width, bool k_major) {
  check_values(g.out, (g.end - g.begin) * width * g.kc);
  const int64_t lo = g.begin * width, hi = std::min(g.end * width, g.size);
  if (k_major) {
    for (int64_t kk = 0; kk < g.kc; ++kk) check_values(g.x + (g.p0 + kk) * g.ld + g.first + lo, hi - lo);
    check_values(g.sums ? g.sums + lo : nullptr, hi - lo);
  } else {
    for (int64_t r = lo; r < hi; ++r) check_values(g.x + (g.first + r) * g.ld + g.p0, g.kc);
  }
}
void checked_pack_a(const GemmPackArgs& g) {
  check_pack(g, current()->gemm_mr, g.trans);
  current()->gemm_pack_a(g);
}
void checked_pack_b(const GemmPackArgs& g) {
  check_pack(g, current()->gemm_nr, !g.trans);
  current()->gemm_pack_b(g);
}
#endif

}  // namespace

Isa active_isa() { return current()->isa; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::SSE2: return "sse2";
    case Isa::AVX2: return "avx2";
    case Isa::AVX512: return "avx512";
    case Isa::NEON: return "neon";
  }
  return "?";
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (const Table& t : tables()) out.push_back(t.isa);
  return out;
}

void force_isa(Isa isa) {
  const Table* t = select(isa);
  QKV_CHECK(t, "simd: this CPU lacks the instruction set ", isa_name(isa), " (it has ", cpu_levels(), ")");
  current() = t;
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::SSE2, Isa::AVX2, Isa::AVX512, Isa::NEON})
    if (name == isa_name(isa)) return isa;
  throw Error(cat("simd: unknown instruction set '", name, "' (sse2, avx2, avx512, neon)"));
}

GemmKernel gemm_kernel() {
  const Table* t = current();
#if defined(__SANITIZE_ADDRESS__)
  if (t->gemm_mr > 0) return {t->gemm_mr, t->gemm_nr, checked_tile, checked_pack_a, checked_pack_b};
#endif
  return {t->gemm_mr, t->gemm_nr, t->gemm_tile, t->gemm_pack_a, t->gemm_pack_b};
}

// Each entry point checks its operands' n values (a no-op but under AddressSanitizer), then runs the level's kernel.
void exp(const float* x, float* y, int64_t n) {
  check_values(x, n), check_values(y, n);
  current()->exp(x, y, n);
}
void tanh(const float* x, float* y, int64_t n) {
  check_values(x, n), check_values(y, n);
  current()->tanh(x, y, n);
}
void sigmoid(const float* x, float* y, int64_t n) {
  check_values(x, n), check_values(y, n);
  current()->sigmoid(x, y, n);
}
void gelu_tanh(const float* x, float* y, int64_t n) {
  check_values(x, n), check_values(y, n);
  current()->gelu_tanh(x, y, n);
}
void gelu_tanh_backward(const float* x, const float* g, float* gx, int64_t n) {
  check_values(x, n), check_values(g, n), check_values(gx, n);
  current()->gelu_tanh_backward(x, g, gx, n);
}
double sum(const float* x, int64_t n) {
  check_values(x, n);
  return current()->sum(x, n);
}
double dot(const float* a, const float* b, int64_t n) {
  check_values(a, n), check_values(b, n);
  return current()->dot(a, b, n);
}
float max(const float* x, int64_t n) {
  check_values(x, n);
  return current()->max(x, n);
}
double exp_shifted_sum(const float* x, float shift, float* y, int64_t n) {
  check_values(x, n), check_values(y, n);
  return current()->exp_shifted_sum(x, shift, y, n);
}
void exp_shifted_scaled(const float* x, float shift, float scale, float* y, int64_t n) {
  check_values(x, n), check_values(y, n);
  current()->exp_shifted_scaled(x, shift, scale, y, n);
}
void scale(float* y, float s, int64_t n) {
  check_values(y, n);
  current()->scale(y, s, n);
}
void scale_by_double(float* y, double s, int64_t n) {
  check_values(y, n);
  current()->scale_by_double(y, s, n);
}
void add_inplace(float* acc, const float* x, int64_t n) {
  check_values(acc, n), check_values(x, n);
  current()->add_inplace(acc, x, n);
}
void softmax_backward_row(const float* y, const float* g, float* gx, int64_t n) {
  check_values(y, n), check_values(g, n), check_values(gx, n);
  current()->softmax_backward_row(y, g, gx, n);
}
void layer_norm_row(const float* x, float mu, float rstd, const float* w, const float* b, float* y, int64_t n) {
  check_values(x, n), check_values(w, n), check_values(b, n), check_values(y, n);
  current()->layer_norm_row(x, mu, rstd, w, b, y, n);
}
void row_moments(const float* x, int64_t n, double eps, double& mu, double& rstd) {
  check_values(x, n);
  current()->row_moments(x, n, eps, mu, rstd);
}
void layer_norm_backward_row(const float* x, const float* g, const float* w, float mu, float rstd, float* gx,
                             int64_t n) {
  check_values(x, n), check_values(g, n), check_values(w, n), check_values(gx, n);
  current()->layer_norm_backward_row(x, g, w, mu, rstd, gx, n);
}
void layer_norm_param_grads(const float* x, const float* g, float mu, float rstd, float* gw, float* gb, int64_t n) {
  check_values(x, n), check_values(g, n), check_values(gw, n), check_values(gb, n);
  current()->layer_norm_param_grads(x, g, mu, rstd, gw, gb, n);
}
void adam(const AdamStep& s, float* p, const float* g, float* m, float* v, int64_t n) {
  check_values(p, n), check_values(g, n), check_values(m, n), check_values(v, n);
  current()->adam(s, p, g, m, v, n);
}

}  // namespace qkv::simd
