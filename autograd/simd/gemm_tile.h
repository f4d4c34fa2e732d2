// The float32 matrix product's micro-kernel, written once over
// xsimd::batch<float, A> and included by the per-level files (through
// kernels.h). autograd/ops/sgemm.cpp packs the operands for it.
//
// One call computes a tile of at most MR rows and NR = 2 vectors of columns:
//   acc[r][j] = Σ_k a[k·MR + r] · b[k·NR + j]      (one FMA per k, k in order)
// from k-major panels of A and B, and writes it into C:
//   first k-block:  c = alpha·acc + beta·c   (beta == 0: c = alpha·acc, C is not read)
//                   c = alpha·acc + bias[j]  (with a bias row: linear's, without a pass to copy it into C)
//   later blocks:   c = c + alpha·acc
// The bias gives the bits of copying it into C and taking beta = 1 (1·c is exact).
// A partial tile (rows < MR or cols < NR) runs the same loop over zero-padded
// panels and the same multiplies and adds, one element at a time, so every
// element of C is computed the same way wherever it lies. With FMAs in k
// order, AVX2 and AVX-512 give the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <xsimd/xsimd.hpp>

#include "autograd/simd/table.h"
#include "autograd/simd/transpose.h"

namespace qkv::simd::detail {
namespace {

template <class A> struct Kernels;  // kernels.h, which includes this file: its add_inplace sums rows

template <class A, int MR> struct GemmTile {
  using B = xsimd::batch<float, A>;
  static constexpr int W = static_cast<int>(B::size);
  static constexpr int NR = 2 * W;

  // A's row panels, k-major (a[kk·MR + r]). Transposed A (stored [k, n]) packs in strips of k-steps
  // (for_strips); A stored [n, k] is transposed MR rows at a time. (Packed row-major
  // instead, a copy, the tile read 12 rows at once, and [2048, 256]·[256, 768] ran 3-6% slower.)
  static void pack_a(const GemmPackArgs& g) {
    if (g.trans) {
      for_strips<MR>(g);
      return;
    }
    for (int64_t p = g.begin; p < g.end; ++p)
      transpose_rows(g.x + (g.first + p * MR) * g.ld + g.p0, g.ld, std::min<int64_t>(MR, g.size - p * MR), g.kc,
                     g.out + (p - g.begin) * MR * g.kc, MR);
  }

  // B's column panels, k-major (b[kk·NR + j]). B stored [k, m] packs in strips of k-steps (for_strips); transposed B
  // (stored [m, k]) is transposed NR rows at a time.
  static void pack_b(const GemmPackArgs& g) {
    if (!g.trans) {
      for_strips<NR>(g);
      return;
    }
    for (int64_t q = g.begin; q < g.end; ++q)
      transpose_rows(g.x + (g.first + q * NR) * g.ld + g.p0, g.ld, std::min<int64_t>(NR, g.size - q * NR), g.kc,
                     g.out + (q - g.begin) * NR * g.kc, NR);
  }

  // Panels [begin, end) of `width` values a k-step from an operand stored k-major (a stored row is one
  // k-step of every panel), a strip of kStrip k-steps at a time: within a strip each panel's steps are
  // written one after another. Step by step across all panels instead, the writes went to as many
  // streams as panels, kc·width·4 bytes apart: with kc = 512 that is a multiple of 4 KiB, so every stream
  // fell in one L1 set, and [1024, 512]ᵀ·[1024, 128] ran at 1.30x OpenBLAS's time on AVX2 (1 thread).
  // The row sums of a transposed A (g.sums) are added strip by strip, k in order, while its rows are in cache.
  template <int width> static void for_strips(const GemmPackArgs& g) {
    constexpr int64_t kStrip = 8;  // TN with row sums, AVX2, 1 thread: 1 step 1.12-1.23x, 8 steps 1.03-1.07x
    const int64_t lo = g.begin * width, hi = std::min(g.end * width, g.size);  // the packed rows or columns
    for (int64_t k0 = 0; k0 < g.kc; k0 += kStrip) {
      const int64_t k1 = std::min(g.kc, k0 + kStrip);
      for (int64_t p = g.begin; p < g.end; ++p) {
        const float* src = g.x + g.first + p * width;
        float* dst = g.out + (p - g.begin) * width * g.kc;
        for (int64_t kk = k0; kk < k1; ++kk)
          padded<width>(src + (g.p0 + kk) * g.ld, dst + kk * width, g.size - p * width);
      }
      if (g.sums)  // column_sums' own add
        for (int64_t kk = k0; kk < k1; ++kk)
          Kernels<A>::add_inplace(g.sums + lo, g.x + (g.p0 + kk) * g.ld + g.first + lo, hi - lo);
    }
  }

  // A k-major panel, `width` (MR or NR) values a k-step, from `count` <= width stored rows of the operand
  // (row j at src + j·ld, its k-th value at + k); columns count..width are zeros. Each W×W block is
  // transposed in registers (autograd/simd/transpose.h); the last kc mod W steps go one value at a time.
  static void transpose_rows(const float* src, int64_t ld, int64_t count, int64_t kc, float* panel, int width) {
    const int64_t whole = kc / W * W;
    for (int64_t j0 = 0; j0 < width; j0 += W) {
      const int64_t real = std::clamp<int64_t>(count - j0, 0, W), stored = std::min<int64_t>(W, width - j0);
      if (real == 0) {  // a half panel past the last column: zeros, nothing to transpose
        for (int64_t k = 0; k < whole; ++k) std::fill_n(panel + k * width + j0, stored, 0.0f);
        continue;
      }
      for (int64_t k = 0; k < whole; k += W) {
        B rows[W];
        for (int64_t i = 0; i < W; ++i) rows[i] = i < real ? B::load_unaligned(src + (j0 + i) * ld + k) : B(0.0f);
        transpose_block(rows);
        for (int64_t t = 0; t < W; ++t) {
          float* dst = panel + (k + t) * width + j0;
          if (stored == W) {
            rows[t].store_unaligned(dst);
          } else {  // MR < W: the first MR lanes
            alignas(64) float lanes[W];
            rows[t].store_aligned(lanes);
            std::memcpy(dst, lanes, stored * sizeof(float));
          }
        }
      }
    }
    for (int64_t k = whole; k < kc; ++k)
      for (int64_t j = 0; j < width; ++j) panel[k * width + j] = j < count ? src[j * ld + k] : 0.0f;
  }

  // dst[0, N) = src[0, available), then zeros: one k-step of a panel. A whole step is a fixed-size memcpy,
  // which the compiler makes a few vector moves: a loop of W-wide vectors left MR = 12 < 16 floats to a
  // scalar loop, and packing a transposed A took 22% of a [1088, 256]ᵀ·[1088, 64] product.
  template <int N> static void padded(const float* src, float* dst, int64_t available) {
    if (available >= N) {
      std::memcpy(dst, src, N * sizeof(float));
      return;
    }
    for (int64_t j = 0; j < N; ++j) dst[j] = j < available ? src[j] : 0.0f;
  }

  static void tile(const GemmTileArgs& t) {
    B acc0[MR], acc1[MR];
    for (int r = 0; r < MR; ++r) acc0[r] = acc1[r] = B(0.0f);
    const float* a = t.a;
    const float* b = t.b;
    for (int64_t k = 0; k < t.kc; ++k, a += MR, b += NR) {
      B b0 = B::load_aligned(b), b1 = B::load_aligned(b + W);
      for (int r = 0; r < MR; ++r) {
        B ar(a[r]);
        acc0[r] = xsimd::fma(ar, b0, acc0[r]);
        acc1[r] = xsimd::fma(ar, b1, acc1[r]);
      }
    }
    const B alpha(t.alpha), beta(t.beta);
    if (t.rows == MR && t.cols == NR) {
      for (int r = 0; r < MR; ++r) {
        float* c = t.c + r * t.ldc;
        B x0 = acc0[r] * alpha, x1 = acc1[r] * alpha;
        if (!t.first) {
          x0 = B::load_unaligned(c) + x0;
          x1 = B::load_unaligned(c + W) + x1;
        } else if (t.bias) {
          x0 = x0 + B::load_unaligned(t.bias);
          x1 = x1 + B::load_unaligned(t.bias + W);
        } else if (t.beta != 0.0f) {
          x0 = x0 + beta * B::load_unaligned(c);
          x1 = x1 + beta * B::load_unaligned(c + W);
        }
        x0.store_unaligned(c);
        x1.store_unaligned(c + W);
      }
      return;
    }
    alignas(64) float out[MR * NR];
    for (int r = 0; r < MR; ++r) {
      acc0[r].store_aligned(out + r * NR);
      acc1[r].store_aligned(out + r * NR + W);
    }
    for (int64_t r = 0; r < t.rows; ++r) {
      float* c = t.c + r * t.ldc;
      for (int64_t j = 0; j < t.cols; ++j) {
        float x = out[r * NR + j] * t.alpha;
        if (!t.first)
          x = c[j] + x;
        else if (t.bias)
          x = x + t.bias[j];
        else if (t.beta != 0.0f)
          x = x + t.beta * c[j];
        c[j] = x;
      }
    }
  }
};

}  // namespace
}  // namespace qkv::simd::detail
