// The vector kernels of autograd/simd.h, written once over
// xsimd::batch<float, A>. Included only by the per-level files beside it,
// each compiled for its own instruction set; everything here has internal
// linkage, so no level's code can stand in for another's at link time.
//
// A row's tail (n not a multiple of the lane count) goes through the same
// vector code on a padded copy, so every element of a row is computed the
// same way. (scale_by_double alone is a plain loop the compiler vectorizes:
// its one multiply rounds the same in any lane or in scalar code.)
//
// Fused multiply-adds appear only where written (xsimd::fma): the library is
// built with -ffp-contract=off, so the compiler never fuses a multiply and an
// add on its own, and a kernel's numbers do not depend on how it was inlined.
#pragma once

#include <cmath>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "autograd/simd/gemm_tile.h"
#include "autograd/simd/table.h"

#if XSIMD_WITH_AVX512F
// xsimd 8.1 has no fused multiply-add kernels for avx512f: its fma, fms, fnma
// and fnms there are the generic x*y + z, a multiply and an add. They used to
// become FMAs only when the compiler contracted them after inlining, which
// -O3 did and the sanitizer build did not, so AVX-512 computed like SSE2
// there (gelu_tanh 4.5 ULP, over its bound). These give avx512f the same
// single-rounding operations that xsimd's fma3<avx2> has. They are explicit
// specializations of xsimd's generic templates, which is how its own API
// calls (kernel::fma<A>(..., A{})) reach them.
namespace xsimd::kernel {
template <>
inline batch<float, avx512f> fma<avx512f, float>(batch<float, avx512f> const& x, batch<float, avx512f> const& y,
                                                 batch<float, avx512f> const& z, requires_arch<generic>) noexcept {
  return _mm512_fmadd_ps(x, y, z);  // x·y + z
}
template <>
inline batch<float, avx512f> fms<avx512f, float>(batch<float, avx512f> const& x, batch<float, avx512f> const& y,
                                                 batch<float, avx512f> const& z, requires_arch<generic>) noexcept {
  return _mm512_fmsub_ps(x, y, z);  // x·y − z
}
template <>
inline batch<float, avx512f> fnma<avx512f, float>(batch<float, avx512f> const& x, batch<float, avx512f> const& y,
                                                  batch<float, avx512f> const& z, requires_arch<generic>) noexcept {
  return _mm512_fnmadd_ps(x, y, z);  // −x·y + z
}
template <>
inline batch<float, avx512f> fnms<avx512f, float>(batch<float, avx512f> const& x, batch<float, avx512f> const& y,
                                                  batch<float, avx512f> const& z, requires_arch<generic>) noexcept {
  return _mm512_fnmsub_ps(x, y, z);  // −x·y − z
}
}  // namespace xsimd::kernel
#endif

#if XSIMD_WITH_NEON64
// xsimd 8.1 divides and takes square roots of floats on NEON with estimate
// instructions and Newton steps (its 32-bit ARM code, which neon64 inherits):
// a few ULP off, and not IEEE's correctly rounded results. AArch64 has the
// exact instructions (fdiv, fsqrt); these specializations give neon64 them,
// so a quotient or root rounds as it does on x86 and in scalar code. Without
// them NEON's sigmoid measured 2.99 ULP (bound 2.5) and gelu_tanh's
// derivative 20.5 (bound 10).
namespace xsimd::kernel {
template <> inline batch<float, neon64> div<neon64>(batch<float, neon64> const& lhs, batch<float, neon64> const& rhs,
                                                    requires_arch<neon>) noexcept {
  return vdivq_f32(lhs, rhs);
}
template <> inline batch<float, neon64> sqrt<neon64>(batch<float, neon64> const& arg, requires_arch<neon>) noexcept {
  return vsqrtq_f32(arg);
}
}  // namespace xsimd::kernel
#endif

namespace qkv::simd::detail {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluC = 0.044715f;

template <class A> struct Kernels {
  using B = xsimd::batch<float, A>;
  static constexpr int64_t W = static_cast<int64_t>(B::size);

  // Calls body(batch_of_x...) -> batch for every full vector and once for the
  // padded tail; `pad` fills the unused tail lanes of inputs.
  template <class F> static void map1(const float* x, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + W <= n; i += W) f(B::load_unaligned(x + i)).store_unaligned(y + i);
    if (i < n) {
      alignas(64) float in[64] = {}, out[64];
      std::memcpy(in, x + i, (n - i) * sizeof(float));
      f(B::load_aligned(in)).store_aligned(out);
      std::memcpy(y + i, out, (n - i) * sizeof(float));
    }
  }
  template <class F> static void map2(const float* x, const float* z, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + W <= n; i += W) f(B::load_unaligned(x + i), B::load_unaligned(z + i)).store_unaligned(y + i);
    if (i < n) {
      alignas(64) float a[64] = {}, b[64] = {}, out[64];
      std::memcpy(a, x + i, (n - i) * sizeof(float));
      std::memcpy(b, z + i, (n - i) * sizeof(float));
      f(B::load_aligned(a), B::load_aligned(b)).store_aligned(out);
      std::memcpy(y + i, out, (n - i) * sizeof(float));
    }
  }
  // Sums f(x_i, z_i) in vector lanes; padded lanes contribute f(0, 0), which callers make 0.
  template <class F> static double reduce2(const float* x, const float* z, int64_t n, F f) {
    B acc(0.0f);
    int64_t i = 0;
    for (; i + W <= n; i += W) acc += f(B::load_unaligned(x + i), B::load_unaligned(z + i));
    if (i < n) {
      alignas(64) float a[64] = {}, b[64] = {};
      std::memcpy(a, x + i, (n - i) * sizeof(float));
      std::memcpy(b, z + i, (n - i) * sizeof(float));
      acc += f(B::load_aligned(a), B::load_aligned(b));
    }
    return static_cast<double>(xsimd::hadd(acc));
  }

  static B sigmoid_of(B x) { return B(1.0f) / (B(1.0f) + xsimd::exp(-x)); }

  // xsimd's float exp saturates short of float's range: inf above 88.376 (exp is finite up to 88.72) and 0 below
  // about -87.6 (float's subnormal results go down to -103.97). Lanes past ±87 are rare (a masked score is
  // -inf): they are computed in double and rounded once, like torch's exp there.
  static void exp(const float* x, float* y, int64_t n) {
    map1(x, y, n, [](B v) {
      B e = xsimd::exp(v);
      if (!xsimd::any(xsimd::abs(v) > B(87.0f))) return e;
      alignas(64) float in[B::size], out[B::size];
      v.store_aligned(in);
      e.store_aligned(out);
      for (size_t k = 0; k < B::size; ++k)
        if (std::fabs(in[k]) > 87.0f) out[k] = static_cast<float>(std::exp(static_cast<double>(in[k])));
      return B::load_aligned(out);
    });
  }
  static void tanh(const float* x, float* y, int64_t n) {
    map1(x, y, n, [](B v) { return xsimd::tanh(v); });
  }
  static void sigmoid(const float* x, float* y, int64_t n) { map1(x, y, n, sigmoid_of); }
  static void gelu_tanh(const float* x, float* y, int64_t n) {
    map1(x, y, n, [](B v) {
      B u = B(kGeluK) * xsimd::fma(B(kGeluC) * v, v * v, v);
      return v * sigmoid_of(B(2.0f) * u);
    });
  }
  // 0.5(1 + t) = s and 1 − t² = 4s(1 − s) with s = σ(2u): the same derivative, no cosh.
  static void gelu_tanh_backward(const float* x, const float* g, float* gx, int64_t n) {
    map2(x, g, gx, n, [](B v, B gv) {
      B v2 = v * v;
      B u = B(kGeluK) * xsimd::fma(B(kGeluC) * v, v2, v);
      B du = B(kGeluK) * xsimd::fma(B(3 * kGeluC), v2, B(1.0f));
      B s = sigmoid_of(B(2.0f) * u);
      B one_minus_t2 = B(4.0f) * s * (B(1.0f) - s);
      return gv * xsimd::fma(B(0.5f) * v * one_minus_t2, du, s);
    });
  }

  static double sum(const float* x, int64_t n) {
    return reduce2(x, x, n, [](B a, B) { return a; });
  }
  static double dot(const float* a, const float* b, int64_t n) {
    return reduce2(a, b, n, [](B u, B v) { return u * v; });
  }
  static float max(const float* x, int64_t n) {
    if (n == 0) return -INFINITY;
    B top(-INFINITY);
    auto nan = xsimd::isnan(top);  // all false (and not `v != v`: xsimd 8.1's AVX != is false for NaN)
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      B v = B::load_unaligned(x + i);
      nan = nan | xsimd::isnan(v);
      top = xsimd::max(top, v);
    }
    alignas(64) float lanes[64];
    top.store_aligned(lanes);
    float best = -INFINITY;
    for (int64_t j = 0; j < W; ++j) best = lanes[j] > best ? lanes[j] : best;
    bool any_nan = xsimd::any(nan);
    for (; i < n; ++i) {
      any_nan = any_nan || std::isnan(x[i]);
      best = x[i] > best ? x[i] : best;
    }
    return any_nan ? NAN : best;
  }

  static double exp_shifted_sum(const float* x, float shift, float* y, int64_t n) {
    B acc(0.0f), sh(shift);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      B e = xsimd::exp(B::load_unaligned(x + i) - sh);
      e.store_unaligned(y + i);
      acc += e;
    }
    double total = static_cast<double>(xsimd::hadd(acc));
    if (i < n) {
      alignas(64) float in[64], out[64];
      for (int64_t j = 0; j < W; ++j) in[j] = -INFINITY;  // exp(-inf) = 0 in the padding
      std::memcpy(in, x + i, (n - i) * sizeof(float));
      B e = xsimd::exp(B::load_aligned(in) - sh);
      e.store_aligned(out);
      std::memcpy(y + i, out, (n - i) * sizeof(float));
      total += static_cast<double>(xsimd::hadd(e));
    }
    return total;
  }
  static void exp_shifted_scaled(const float* x, float shift, float scale, float* y, int64_t n) {
    map1(x, y, n, [shift, scale](B v) { return B(scale) * xsimd::exp(v - B(shift)); });
  }
  static void scale(float* y, float s, int64_t n) {
    map1(y, y, n, [s](B v) { return v * B(s); });
  }
  // Plain code the compiler vectorizes for this file's level (float to double lanes, a double
  // multiply, back to float): the same IEEE operations as the scalar loop, so the same bits.
  static void scale_by_double(float* y, double s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(y[i]) * s);
  }
  static void add_inplace(float* acc, const float* x, int64_t n) {
    map2(acc, x, acc, n, [](B a, B b) { return a + b; });
  }
  static void softmax_backward_row(const float* y, const float* g, float* gx, int64_t n) {
    // g − Σ g⊙y nearly cancels where y ≈ 1: subtract the sum as a float pair
    // (hi + lo), so the difference keeps about double accuracy at float cost.
    double d = dot(g, y, n);
    float hi = static_cast<float>(d), lo = static_cast<float>(d - hi);
    map2(y, g, gx, n, [hi, lo](B yv, B gv) { return yv * ((gv - B(hi)) - B(lo)); });
  }
  static void layer_norm_row(const float* x, float mu, float rstd, const float* w, const float* b, float* y,
                             int64_t n) {
    B m(mu), r(rstd);
    auto one = [&](const float* xp, const float* wp, const float* bp) {
      return xsimd::fma((B::load_unaligned(xp) - m) * r, wp ? B::load_unaligned(wp) : B(1.0f),
                        bp ? B::load_unaligned(bp) : B(0.0f));
    };
    int64_t i = 0;
    for (; i + W <= n; i += W) one(x + i, w ? w + i : nullptr, b ? b + i : nullptr).store_unaligned(y + i);
    if (i < n) {
      alignas(64) float xx[64] = {}, ww[64] = {}, bb[64] = {}, out[64];
      int64_t k = n - i;
      std::memcpy(xx, x + i, k * sizeof(float));
      if (w) std::memcpy(ww, w + i, k * sizeof(float));
      if (b) std::memcpy(bb, b + i, k * sizeof(float));
      one(xx, w ? ww : nullptr, b ? bb : nullptr).store_aligned(out);
      std::memcpy(y + i, out, k * sizeof(float));
    }
  }
  static void row_moments(const float* x, int64_t n, double eps, double& mu, double& rstd) {
    mu = sum(x, n) / static_cast<double>(n);
    B m(static_cast<float>(mu)), acc(0.0f);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      B d = B::load_unaligned(x + i) - m;
      acc = xsimd::fma(d, d, acc);
    }
    double var = static_cast<double>(xsimd::hadd(acc));
    for (; i < n; ++i) var += (static_cast<double>(x[i]) - mu) * (static_cast<double>(x[i]) - mu);
    rstd = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
  }
  static void layer_norm_backward_row(const float* x, const float* g, const float* w, float mu, float rstd, float* gx,
                                      int64_t n) {
    B m(mu), r(rstd), sd(0.0f), sdx(0.0f);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      B d = B::load_unaligned(g + i) * (w ? B::load_unaligned(w + i) : B(1.0f));
      sd += d;
      sdx = xsimd::fma(d, (B::load_unaligned(x + i) - m) * r, sdx);
    }
    double mean_d = xsimd::hadd(sd), mean_dx = xsimd::hadd(sdx);
    for (int64_t j = i; j < n; ++j) {
      double d = g[j] * (w ? w[j] : 1.0f);
      mean_d += d;
      mean_dx += d * (x[j] - mu) * rstd;
    }
    float md = static_cast<float>(mean_d / n), mdx = static_cast<float>(mean_dx / n);
    i = 0;
    for (; i + W <= n; i += W) {
      B d = B::load_unaligned(g + i) * (w ? B::load_unaligned(w + i) : B(1.0f));
      B xhat = (B::load_unaligned(x + i) - m) * r;
      (r * (d - B(md) - xhat * B(mdx))).store_unaligned(gx + i);
    }
    for (; i < n; ++i) {
      float d = g[i] * (w ? w[i] : 1.0f);
      gx[i] = rstd * (d - md - (x[i] - mu) * rstd * mdx);
    }
  }
  static void layer_norm_param_grads(const float* x, const float* g, float mu, float rstd, float* gw, float* gb,
                                     int64_t n) {
    B m(mu), r(rstd);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      B gv = B::load_unaligned(g + i);
      if (gw) xsimd::fma(gv, (B::load_unaligned(x + i) - m) * r, B::load_unaligned(gw + i)).store_unaligned(gw + i);
      if (gb) (B::load_unaligned(gb + i) + gv).store_unaligned(gb + i);
    }
    for (; i < n; ++i) {
      if (gw) gw[i] += g[i] * ((x[i] - mu) * rstd);
      if (gb) gb[i] += g[i];
    }
  }
  static void adam(const AdamStep& s, float* p, const float* g, float* m, float* v, int64_t n) {
    B b1(s.beta1), b2(s.beta2), c1(s.one_minus_beta1), c2(s.one_minus_beta2), l2(s.l2), shrink(s.shrink), lr(s.lr),
        ib1(s.inv_bc1), ib2(s.inv_bc2), eps(s.eps);
    auto one = [&](B pv, B gv, B& mv, B& vv) {
      B d = xsimd::fma(l2, pv, gv);
      mv = xsimd::fma(b1, mv, c1 * d);
      vv = xsimd::fma(b2, vv, c2 * d * d);
      return xsimd::fnma(lr, (mv * ib1) / (xsimd::sqrt(vv * ib2) + eps), pv * shrink);
    };
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      B mv = B::load_unaligned(m + i), vv = B::load_unaligned(v + i);
      B pv = one(B::load_unaligned(p + i), B::load_unaligned(g + i), mv, vv);
      pv.store_unaligned(p + i);
      mv.store_unaligned(m + i);
      vv.store_unaligned(v + i);
    }
    if (i < n) {
      alignas(64) float pp[64] = {}, gg[64] = {}, mm[64] = {}, vv2[64] = {};
      int64_t k = n - i;
      std::memcpy(pp, p + i, k * sizeof(float));
      std::memcpy(gg, g + i, k * sizeof(float));
      std::memcpy(mm, m + i, k * sizeof(float));
      std::memcpy(vv2, v + i, k * sizeof(float));
      B mv = B::load_aligned(mm), vv = B::load_aligned(vv2);
      one(B::load_aligned(pp), B::load_aligned(gg), mv, vv).store_aligned(pp);
      mv.store_aligned(mm);
      vv.store_aligned(vv2);
      std::memcpy(p + i, pp, k * sizeof(float));
      std::memcpy(m + i, mm, k * sizeof(float));
      std::memcpy(v + i, vv2, k * sizeof(float));
    }
  }
};

// The micro-kernel's rows: as many as the vector registers hold beside the
// two B vectors and a broadcast (2·MR accumulators): 12 of 32 zmm, 6 of 16
// ymm, 12 of NEON's 32 128-bit registers (a tile of 12 x 8).
// Levels without FMA (SSE2) have none: BLAS computes their products.
template <class A> constexpr int gemm_rows() {
  if constexpr (std::is_same_v<A, xsimd::avx512f>) return 12;
  if constexpr (std::is_same_v<A, xsimd::fma3<xsimd::avx2>>) return 6;
#if XSIMD_WITH_NEON64
  if constexpr (std::is_same_v<A, xsimd::neon64>) return 12;
#endif
  return 0;
}

template <class A> Table table_for(Isa isa) {
  using K = Kernels<A>;
  Table table{isa,
              K::exp,
              K::tanh,
              K::sigmoid,
              K::gelu_tanh,
              K::gelu_tanh_backward,
              K::sum,
              K::dot,
              K::max,
              K::exp_shifted_sum,
              K::exp_shifted_scaled,
              K::scale,
              K::scale_by_double,
              K::add_inplace,
              K::softmax_backward_row,
              K::layer_norm_row,
              K::row_moments,
              K::layer_norm_backward_row,
              K::layer_norm_param_grads,
              K::adam,
              0,
              0,
              nullptr,
              nullptr,
              nullptr};
  if constexpr (constexpr int mr = gemm_rows<A>(); mr > 0) {  // a level without one compiles no micro-kernel
    using G = GemmTile<A, mr>;
    table.gemm_mr = mr, table.gemm_nr = G::NR;
    table.gemm_tile = G::tile, table.gemm_pack_a = G::pack_a, table.gemm_pack_b = G::pack_b;
  }
  return table;
}

}  // namespace
}  // namespace qkv::simd::detail
