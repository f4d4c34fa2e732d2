// Device kernels of fused attention: the math of attention.cpp twice.
//
// Tiled (head dims up to 64): a block of 256 threads takes a tile of query
// (or key) rows into shared memory and steps over the key (or query) rows
// it may see a tile at a time, so each row read from global memory serves a
// whole tile. Each thread owns a 16th of a tile's rows and of its columns,
// so every value is summed by one thread in a fixed order: no atomics, and
// the same bits on every run.
//   Forward, per tile of queries: S = scale·Q·Kᵀ + masks; the online softmax
//   m' = max(m, rowmax S), P = e^(S−m'), l = l·e^(m−m') + ΣP,
//   O = O·e^(m−m') + P·V; finally O /= l, L = m + log l (a fully masked row
//   gives zeros and L = −∞).
//   Backward, recomputing P = e^(S−L) and dS = P ⊙ (dO·Vᵀ − D), D_i = Σ dO_i ⊙ O_i:
//   per tile of keys dV = Σ Pᵀ·dO and dK = scale·Σ dSᵀ·Q over the query
//   tiles; per tile of queries dQ = scale·Σ dS·K over the key tiles (P and
//   dS computed twice rather than dQ summed with atomics).
// Per row (any head dim; the plain reference the tiled kernels are tested
// against): one thread per query row runs the same online softmax over its
// keys, and the backward has one thread per query (dQ) and per key (dK, dV).
#include <cmath>
#include <limits>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

// Where q, k, v (and their gradients) and o live: row strides, and the masks.
template <class T> struct Heads {
  const T* q;
  const T* k;
  const T* v;
  AttentionShape D;
  AttentionMaskView masks;

  QKV_HD const T* q_row(int64_t b, int64_t h, int64_t i) const { return q + (b * D.nq + i) * D.ldq + h * D.d; }
  QKV_HD const T* k_row(int64_t b, int64_t h, int64_t j) const { return k + (b * D.nk + j) * D.ldk + h * D.d; }
  QKV_HD const T* v_row(int64_t b, int64_t h, int64_t j) const { return v + (b * D.nk + j) * D.ldv + h * D.dv; }
  QKV_HD int64_t o_at(int64_t b, int64_t h, int64_t i) const { return (b * D.nq + i) * D.H * D.dv + h * D.dv; }

  // scale·q_i·k_j plus the masks; −∞ where blocked.
  QKV_HD T score(int64_t b, int64_t h, int64_t i, int64_t j, T scale) const {
    if (!sees(b, i, j)) return -std::numeric_limits<T>::infinity();
    const T *qi = q_row(b, h, i), *kj = k_row(b, h, j);
    T s = 0;
    for (int64_t c = 0; c < D.d; ++c) s += qi[c] * kj[c];
    return masked(b, h, i, j, s * scale);
  }
  // Whether the position rules and the key padding let query i see key j.
  QKV_HD bool sees(int64_t b, int64_t i, int64_t j) const {
    return masks.rules.sees(i, j) && (!masks.padding || masks.padding[b * D.nk + j]);
  }
  // A scaled score s of a key query i sees, plus the mask (−∞ where a bool mask blocks).
  QKV_HD T masked(int64_t b, int64_t h, int64_t i, int64_t j, T s) const {
    const T kNegInf = -std::numeric_limits<T>::infinity();
    if (masks.mask) {
      int64_t at = b * masks.sb + h * masks.sh + i * masks.si + j * masks.sj;
      if (masks.mask_is_bool) {
        if (!static_cast<const bool*>(masks.mask)[at]) return kNegInf;
      } else {
        s += static_cast<const T*>(masks.mask)[at];
      }
    }
    return s;
  }
};

template <class T> struct ForwardKernel {
  Heads<T> heads;
  T scale;
  T* o;
  double* lse;
  QKV_HD void operator()(int64_t item) const {
    const AttentionShape& D = heads.D;
    int64_t i = item % D.nq, h = item / D.nq % D.H, b = item / (D.nq * D.H);
    T* oi = o + heads.o_at(b, h, i);
    for (int64_t c = 0; c < D.dv; ++c) oi[c] = T(0);
    const double kNegInf = -std::numeric_limits<double>::infinity();
    double m = kNegInf, l = 0;
    for (int64_t j = heads.masks.rules.first_key(i), end = heads.masks.rules.end_key(i + 1, D.nk); j < end; ++j) {
      double s = heads.score(b, h, i, j, scale);
      if (s == kNegInf) continue;                                    // blocked: adds nothing
      double top = s != s || m != m ? s + m : (s > m ? s : m);       // a NaN poisons the row
      double correction = std::exp(m - top), p = std::exp(s - top);  // correction 0 while m was −∞
      l = l * correction + p;
      const T* vj = heads.v_row(b, h, j);
      for (int64_t c = 0; c < D.dv; ++c) oi[c] = static_cast<T>(oi[c] * correction + p * vj[c]);
      m = top;
    }
    double* L = lse + (b * D.H + h) * D.nq + i;
    if (l == 0) {  // fully masked row: zeros, and p = 0 in backward
      *L = kNegInf;
      return;
    }
    for (int64_t c = 0; c < D.dv; ++c) oi[c] = static_cast<T>(oi[c] / l);
    *L = m + std::log(l);
  }
};

// D_i = Σ_c dO_i[c]·O_i[c], in double
template <class T> struct RowDotKernel {
  const T* o;
  const T* go;
  double* Drow;
  AttentionShape D;
  QKV_HD void operator()(int64_t item) const {
    int64_t i = item % D.nq, h = item / D.nq % D.H, b = item / (D.nq * D.H);
    int64_t at = (b * D.nq + i) * D.H * D.dv + h * D.dv;
    double s = 0;
    for (int64_t c = 0; c < D.dv; ++c) s += static_cast<double>(go[at + c]) * o[at + c];
    Drow[item] = s;
  }
};

// p_ij and ds_ij = p_ij (dO_i·v_j − D_i), shared by both backward kernels.
template <class T> struct Probabilities {
  Heads<T> heads;
  T scale;
  const T* go;
  const double* lse;
  const double* Drow;

  QKV_HD bool at(int64_t b, int64_t h, int64_t i, int64_t j, T& p, T& ds) const {
    const AttentionShape& D = heads.D;
    int64_t row = (b * D.H + h) * D.nq + i;
    if (lse[row] == -std::numeric_limits<double>::infinity()) return false;
    T s = heads.score(b, h, i, j, scale);
    if (s == -std::numeric_limits<T>::infinity()) return false;
    p = static_cast<T>(std::exp(s - static_cast<T>(lse[row])));
    const T *goi = go + heads.o_at(b, h, i), *vj = heads.v_row(b, h, j);
    T dp = 0;
    for (int64_t c = 0; c < D.dv; ++c) dp += goi[c] * vj[c];
    ds = p * (dp - static_cast<T>(Drow[row]));
    return true;
  }
};

// dQ_i += scale·Σ_j ds_ij k_j
template <class T> struct QueryGradKernel {
  Probabilities<T> P;
  T* gq;  // gq has q's strides
  QKV_HD void operator()(int64_t item) const {
    const AttentionShape& D = P.heads.D;
    int64_t i = item % D.nq, h = item / D.nq % D.H, b = item / (D.nq * D.H);
    T* gqi = gq + (b * D.nq + i) * D.ldq + h * D.d;
    for (int64_t j = P.heads.masks.rules.first_key(i), end = P.heads.masks.rules.end_key(i + 1, D.nk); j < end; ++j) {
      T p, ds;
      if (!P.at(b, h, i, j, p, ds)) continue;
      const T* kj = P.heads.k_row(b, h, j);
      for (int64_t c = 0; c < D.d; ++c) gqi[c] += P.scale * ds * kj[c];
    }
  }
};

// dV_j += Σ_i p_ij dO_i;  dK_j += scale·Σ_i ds_ij q_i
template <class T> struct KeyGradKernel {
  Probabilities<T> P;
  T* gk;  // gk and gv have k's and v's strides
  T* gv;
  QKV_HD void operator()(int64_t item) const {
    const AttentionShape& D = P.heads.D;
    int64_t j = item % D.nk, h = item / D.nk % D.H, b = item / (D.nk * D.H);
    T* gkj = gk + (b * D.nk + j) * D.ldk + h * D.d;
    T* gvj = gv + (b * D.nk + j) * D.ldv + h * D.dv;
    for (int64_t i = P.heads.masks.rules.first_query(j), end = P.heads.masks.rules.end_query(j + 1, D.nq); i < end;
         ++i) {
      T p, ds;
      if (!P.at(b, h, i, j, p, ds)) continue;
      const T *goi = P.go + P.heads.o_at(b, h, i), *qi = P.heads.q_row(b, h, i);
      for (int64_t c = 0; c < D.dv; ++c) gvj[c] += p * goi[c];
      for (int64_t c = 0; c < D.d; ++c) gkj[c] += P.scale * ds * qi[c];
    }
  }
};

// ---- tiled kernels ----

constexpr int kBlockThreads = 256;  // a 16 × 16 grid of threads over each tile

// Rows per tile: queries of a forward or dQ block, keys of a dK/dV block, and
// keys per forward step; the backward steps half as many. Halved for double,
// so that every block's shared memory stays within 100 KB (two blocks to an
// H100 multiprocessor).
template <class T> constexpr int kTileRows = sizeof(T) == 4 ? 64 : 32;

// R rows of C values in shared memory, each row one longer than it needs, so
// that the 16 rows a warp reads at once fall in different banks.
template <class T, int R, int C> struct Tile { T at[R][C + 1]; };

// Thread t's elements of an R × C tile: rows t/16 + 16r, columns t%16 + 16c.
// Only the first `rows` × `cols` are needed (a tile past the end of the
// sequence, a decoding step's one query): a thread none of whose rows or
// none of whose columns is needed skips its elements. Every pass over a tile
// skips by this rule, so what a pass reads an earlier pass wrote.
QKV_HD inline bool skips(int t, int64_t rows, int64_t cols) { return t / 16 >= rows || t % 16 >= cols; }

template <int R, int C, class F> QKV_HD void for_own_elements(int t, int64_t rows, int64_t cols, const F& f) {
  static_assert(R % 16 == 0 && C % 16 == 0, "tiles are cut among 16 × 16 threads");
  if (skips(t, rows, cols)) return;
  QKV_UNROLL for (int r = 0; r < R / 16; ++r) QKV_UNROLL for (int c = 0; c < C / 16; ++c)
      f(t / 16 + 16 * r, t % 16 + 16 * c);
}

// Thread t's part of an R × C product: out(i, j, Σ_{k<depth} a(i, k)·b(j, k))
// for its own elements, in registers (it reads R/16 + C/16 values a step for
// R·C/256 multiply-adds); `rows` × `cols` needed, as for_own_elements.
template <class T, int R, int C, class A, class B, class Out>
QKV_HD void tile_product(int t, int64_t rows, int64_t cols, int64_t depth, const A& a, const B& b, const Out& out) {
  constexpr int kR = R / 16, kC = C / 16;
  if (skips(t, rows, cols)) return;
  const int ty = t / 16, tx = t % 16;
  T acc[kR][kC];
  QKV_UNROLL for (int r = 0; r < kR; ++r) QKV_UNROLL for (int c = 0; c < kC; ++c) acc[r][c] = T(0);
  for (int64_t k = 0; k < depth; ++k) {
    T av[kR], bv[kC];
    QKV_UNROLL for (int r = 0; r < kR; ++r) av[r] = a(ty + 16 * r, k);
    QKV_UNROLL for (int c = 0; c < kC; ++c) bv[c] = b(tx + 16 * c, k);
    QKV_UNROLL for (int r = 0; r < kR; ++r) QKV_UNROLL for (int c = 0; c < kC; ++c) acc[r][c] += av[r] * bv[c];
  }
  QKV_UNROLL for (int r = 0; r < kR; ++r) QKV_UNROLL for (int c = 0; c < kC; ++c)
      out(ty + 16 * r, tx + 16 * c, acc[r][c]);
}

// Rows [r0, r0 + R) of one head's rows (row(i) points at row i's first
// value) into a tile: the first `width` columns, zeros past them and from
// row n on, so that products over whole tiles add nothing from there.
template <class T, int R, int C, class Row>
QKV_HD void load_rows(int t, Tile<T, R, C>& tile, int64_t r0, int64_t n, int64_t width, const Row& row) {
  for (int e = t; e < R * C; e += kBlockThreads) {
    const int r = e / C, c = e % C;
    tile.at[r][c] = r0 + r < n && c < width ? row(r0 + r)[c] : T(0);
  }
}

template <class T, int R, int C> QKV_HD void zero(int t, Tile<T, R, C>& tile) {
  for (int e = t; e < R * C; e += kBlockThreads) tile.at[e / C][e % C] = T(0);
}

template <class T> QKV_HD int64_t tiles_of(int64_t n) { return (n + kTileRows<T> - 1) / kTileRows<T>; }

// Which batch, head and rows [first, first + count) of n rows block `block` takes.
struct TileAt {
  int64_t b, h, first, count;
};
template <class T> QKV_HD TileAt tile_at(int64_t block, int64_t n, int64_t H) {
  const int64_t tiles = tiles_of<T>(n), first = block % tiles * kTileRows<T>;
  return {block / (H * tiles), block / tiles % H, first, n - first < kTileRows<T> ? n - first : kTileRows<T>};
}

// The masked, scaled score of query i and key j (−∞ where blocked or past the ends).
template <class T>
QKV_HD T tile_score(const Heads<T>& heads, int64_t b, int64_t h, int64_t i, int64_t j, T dot, T scale) {
  if (i >= heads.D.nq || j >= heads.D.nk || !heads.sees(b, i, j)) return -std::numeric_limits<T>::infinity();
  return heads.masked(b, h, i, j, dot * scale);
}

// The forward over a tile of kTileRows queries (head dims up to kD).
template <class T, int kD> struct TiledForward {
  static constexpr int kThreads = kBlockThreads, kRows = kTileRows<T>;
  struct Shared {
    Tile<T, kRows, kD> q, k, v, o;
    Tile<T, kRows, kRows> s;  // scores, then probabilities
    double m[kRows], l[kRows];
    T correction[kRows];
  };
  Heads<T> heads;
  T scale;
  T* o;
  double* lse;

  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const AttentionShape& D = heads.D;
    const TileAt at = tile_at<T>(block, D.nq, D.H);
    const int64_t b = at.b, h = at.h, i0 = at.first, rows = at.count;
    const double kNegInf = -std::numeric_limits<double>::infinity();
    threads.each([&](int t) {
      load_rows(t, sh.q, i0, D.nq, D.d, [&](int64_t i) { return heads.q_row(b, h, i); });
      zero(t, sh.o);
      if (t < kRows) sh.m[t] = kNegInf, sh.l[t] = 0;
    });
    for (int64_t j0 = heads.masks.rules.first_key(i0), end = heads.masks.rules.end_key(i0 + rows, D.nk); j0 < end;
         j0 += kRows) {
      const int64_t cols = end - j0 < kRows ? end - j0 : kRows;
      threads.each([&](int t) {
        load_rows(t, sh.k, j0, D.nk, D.d, [&](int64_t j) { return heads.k_row(b, h, j); });
        load_rows(t, sh.v, j0, D.nk, D.dv, [&](int64_t j) { return heads.v_row(b, h, j); });
      });
      threads.each([&](int t) {
        tile_product<T, kRows, kRows>(
            t, rows, cols, D.d, [&](int i, int64_t c) { return sh.q.at[i][c]; },
            [&](int j, int64_t c) { return sh.k.at[j][c]; },
            [&](int i, int j, T dot) { sh.s.at[i][j] = tile_score(heads, b, h, i0 + i, j0 + j, dot, scale); });
      });
      threads.each([&](int t) {  // the online softmax, a thread per query row
        if (t >= kRows) return;
        if (t >= rows) {  // past the queries: left as they are (their outputs are never written)
          sh.correction[t] = T(1);
          return;
        }
        T* s = sh.s.at[t];
        double block_max = kNegInf;  // a NaN score poisons its row, as in softmax
        for (int64_t j = 0; j < cols; ++j)
          if (s[j] != s[j] || s[j] > block_max) block_max = s[j];
        const double m = sh.m[t];
        const double top = block_max != block_max || m != m ? block_max + m : (m > block_max ? m : block_max);
        if (top == kNegInf) {  // every key so far blocked: nothing to add
          for (int64_t j = 0; j < cols; ++j) s[j] = T(0);
          sh.correction[t] = T(1);
          return;
        }
        const double correction = std::exp(m - top);  // 0 while m was −∞
        double sum = 0;
        for (int64_t j = 0; j < cols; ++j) sum += (s[j] = std::exp(s[j] - static_cast<T>(top)));
        sh.l[t] = sh.l[t] * correction + sum;
        sh.m[t] = top;
        sh.correction[t] = static_cast<T>(correction);
      });
      threads.each([&](int t) {
        tile_product<T, kRows, kD>(
            t, rows, D.dv, cols, [&](int i, int64_t j) { return sh.s.at[i][j]; },
            [&](int c, int64_t j) { return sh.v.at[j][c]; },
            [&](int i, int c, T pv) { sh.o.at[i][c] = sh.o.at[i][c] * sh.correction[i] + pv; });
      });
    }
    threads.each([&](int t) {
      for (int e = t; e < kRows * kD; e += kThreads) {
        const int r = e / kD, c = e % kD;
        if (r < rows && c < D.dv) {
          const double l = sh.l[r];  // 0: a fully masked row gives zeros
          o[heads.o_at(b, h, i0 + r) + c] = l == 0 ? T(0) : static_cast<T>(sh.o.at[r][c] / l);
        }
      }
      if (t < rows) lse[(b * D.H + h) * D.nq + i0 + t] = sh.l[t] == 0 ? kNegInf : sh.m[t] + std::log(sh.l[t]);
    });
  }
};

// What both backward kernels read of a query tile's rows besides q and dO:
// L and D (rows past n_q get L = −∞, so P = 0 there).
template <class T> QKV_HD void load_row_stats(int t, int rows_in_tile, const Heads<T>& heads, int64_t b, int64_t h,
                                              int64_t i0, const double* lse, const double* Drow, double* L,
                                              double* Dt) {
  if (t >= rows_in_tile) return;
  const AttentionShape& D = heads.D;
  const bool real = i0 + t < D.nq;
  const int64_t row = (b * D.H + h) * D.nq + i0 + t;
  L[t] = real ? lse[row] : -std::numeric_limits<double>::infinity();
  Dt[t] = real ? Drow[row] : 0.0;
}

// Thread t's elements of P = e^(S − L) and dS = P ⊙ (dO·Vᵀ − D) for queries
// i0 + [0, rows) and keys j0 + [0, cols) (tiles of R and C rows), from tiles
// q, go (R rows) and k, v (C rows).
template <class T, int R, int C, int kD> struct ProbabilityTiles {
  const Heads<T>& heads;
  T scale;
  int64_t b, h, i0, j0, rows, cols;
  QKV_HD void operator()(int t, const Tile<T, R, kD>& q, const Tile<T, R, kD>& go, const Tile<T, C, kD>& k,
                         const Tile<T, C, kD>& v, const double* L, const double* Dt, Tile<T, R, C>& p,
                         Tile<T, R, C>& ds) const {
    tile_product<T, R, C>(
        t, rows, cols, heads.D.d, [&](int i, int64_t c) { return q.at[i][c]; },
        [&](int j, int64_t c) { return k.at[j][c]; },
        [&](int i, int j, T dot) { p.at[i][j] = tile_score(heads, b, h, i0 + i, j0 + j, dot, scale); });
    tile_product<T, R, C>(
        t, rows, cols, heads.D.dv, [&](int i, int64_t c) { return go.at[i][c]; },
        [&](int j, int64_t c) { return v.at[j][c]; }, [&](int i, int j, T dp) { ds.at[i][j] = dp; });
    for_own_elements<R, C>(t, rows, cols, [&](int i, int j) {
      const T s = p.at[i][j];
      const bool blocked = L[i] == -std::numeric_limits<double>::infinity() || s == -std::numeric_limits<T>::infinity();
      const T pij = blocked ? T(0) : static_cast<T>(std::exp(s - static_cast<T>(L[i])));
      p.at[i][j] = pij;
      ds.at[i][j] = pij * (ds.at[i][j] - static_cast<T>(Dt[i]));
    });
  }
};

// What both backward kernels read: q, k, v and the masks, the scale, dO, L
// and D.
template <class T> struct GradInputs {
  Heads<T> heads;
  T scale;
  const T* go;
  const double* lse;
  const double* Drow;
};

// dK and dV over a tile of kTileRows keys, a step of half as many queries at a time.
template <class T, int kD> struct TiledKeyGrads {
  static constexpr int kThreads = kBlockThreads, kRows = kTileRows<T>, kStep = kRows / 2;
  struct Shared {
    Tile<T, kRows, kD> k, v, dk, dv;
    Tile<T, kStep, kD> q, go;
    Tile<T, kStep, kRows> p, ds;
    double L[kStep], Dt[kStep];
  };
  GradInputs<T> in;
  T* gk;
  T* gv;

  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const Heads<T>& heads = in.heads;
    const T scale = in.scale;
    const T* go = in.go;
    const AttentionShape& D = heads.D;
    const TileAt at = tile_at<T>(block, D.nk, D.H);
    const int64_t b = at.b, h = at.h, j0 = at.first, cols = at.count;
    threads.each([&](int t) {
      load_rows(t, sh.k, j0, D.nk, D.d, [&](int64_t j) { return heads.k_row(b, h, j); });
      load_rows(t, sh.v, j0, D.nk, D.dv, [&](int64_t j) { return heads.v_row(b, h, j); });
      zero(t, sh.dk);
      zero(t, sh.dv);
    });
    for (int64_t i0 = heads.masks.rules.first_query(j0), end = heads.masks.rules.end_query(j0 + cols, D.nq); i0 < end;
         i0 += kStep) {
      const int64_t rows = end - i0 < kStep ? end - i0 : kStep;
      threads.each([&](int t) {
        load_rows(t, sh.q, i0, D.nq, D.d, [&](int64_t i) { return heads.q_row(b, h, i); });
        load_rows(t, sh.go, i0, D.nq, D.dv, [&](int64_t i) { return go + heads.o_at(b, h, i); });
        load_row_stats(t, kStep, heads, b, h, i0, in.lse, in.Drow, sh.L, sh.Dt);
      });
      threads.each([&](int t) {
        ProbabilityTiles<T, kStep, kRows, kD>{heads, scale, b, h, i0, j0, rows, cols}(t, sh.q, sh.go, sh.k, sh.v, sh.L,
                                                                                      sh.Dt, sh.p, sh.ds);
      });
      threads.each([&](int t) {  // dV += Pᵀ·dO, dK += scale·dSᵀ·Q
        tile_product<T, kRows, kD>(
            t, cols, D.dv, rows, [&](int j, int64_t i) { return sh.p.at[i][j]; },
            [&](int c, int64_t i) { return sh.go.at[i][c]; }, [&](int j, int c, T sum) { sh.dv.at[j][c] += sum; });
        tile_product<T, kRows, kD>(
            t, cols, D.d, rows, [&](int j, int64_t i) { return sh.ds.at[i][j]; },
            [&](int c, int64_t i) { return sh.q.at[i][c]; },
            [&](int j, int c, T sum) { sh.dk.at[j][c] += scale * sum; });
      });
    }
    threads.each([&](int t) {
      for (int e = t; e < kRows * kD; e += kThreads) {
        const int r = e / kD, c = e % kD;
        if (r >= cols) continue;
        if (c < D.d) gk[(b * D.nk + j0 + r) * D.ldk + h * D.d + c] += sh.dk.at[r][c];
        if (c < D.dv) gv[(b * D.nk + j0 + r) * D.ldv + h * D.dv + c] += sh.dv.at[r][c];
      }
    });
  }
};

// dQ over a tile of kTileRows queries, a step of half as many keys at a time.
template <class T, int kD> struct TiledQueryGrads {
  static constexpr int kThreads = kBlockThreads, kRows = kTileRows<T>, kStep = kRows / 2;
  struct Shared {
    Tile<T, kRows, kD> q, go, dq;
    Tile<T, kStep, kD> k, v;
    Tile<T, kRows, kStep> p, ds;
    double L[kRows], Dt[kRows];
  };
  GradInputs<T> in;
  T* gq;

  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const Heads<T>& heads = in.heads;
    const T scale = in.scale;
    const T* go = in.go;
    const AttentionShape& D = heads.D;
    const TileAt at = tile_at<T>(block, D.nq, D.H);
    const int64_t b = at.b, h = at.h, i0 = at.first, rows = at.count;
    threads.each([&](int t) {
      load_rows(t, sh.q, i0, D.nq, D.d, [&](int64_t i) { return heads.q_row(b, h, i); });
      load_rows(t, sh.go, i0, D.nq, D.dv, [&](int64_t i) { return go + heads.o_at(b, h, i); });
      load_row_stats(t, kRows, heads, b, h, i0, in.lse, in.Drow, sh.L, sh.Dt);
      zero(t, sh.dq);
    });
    for (int64_t j0 = heads.masks.rules.first_key(i0), end = heads.masks.rules.end_key(i0 + rows, D.nk); j0 < end;
         j0 += kStep) {
      const int64_t cols = end - j0 < kStep ? end - j0 : kStep;
      threads.each([&](int t) {
        load_rows(t, sh.k, j0, D.nk, D.d, [&](int64_t j) { return heads.k_row(b, h, j); });
        load_rows(t, sh.v, j0, D.nk, D.dv, [&](int64_t j) { return heads.v_row(b, h, j); });
      });
      threads.each([&](int t) {
        ProbabilityTiles<T, kRows, kStep, kD>{heads, scale, b, h, i0, j0, rows, cols}(t, sh.q, sh.go, sh.k, sh.v, sh.L,
                                                                                      sh.Dt, sh.p, sh.ds);
      });
      threads.each([&](int t) {  // dQ += scale·dS·K
        tile_product<T, kRows, kD>(
            t, rows, D.d, cols, [&](int i, int64_t j) { return sh.ds.at[i][j]; },
            [&](int c, int64_t j) { return sh.k.at[j][c]; },
            [&](int i, int c, T sum) { sh.dq.at[i][c] += scale * sum; });
      });
    }
    threads.each([&](int t) {
      for (int e = t; e < kRows * kD; e += kThreads) {
        const int r = e / kD, c = e % kD;
        if (r < rows && c < D.d) gq[(b * D.nq + i0 + r) * D.ldq + h * D.d + c] += sh.dq.at[r][c];
      }
    });
  }
};

}  // namespace

// The tiled kernels take head dims up to 64 (in tiles 32 or 64 wide); wider
// heads run the per-row kernels.
constexpr int64_t kTiledHeadDims = 64;

template <class T> void attention_forward(const AttentionShape& D, const AttentionMaskView& masks, T scale, const T* q,
                                          const T* k, const T* v, T* o, double* lse, Device device) {
  const Heads<T> heads{q, k, v, D, masks};
  const int64_t width = D.d > D.dv ? D.d : D.dv, blocks = D.B * D.H * tiles_of<T>(D.nq);
  if (width <= 32)
    kernel::launch_blocks("fused_attention", device, blocks, TiledForward<T, 32>{heads, scale, o, lse});
  else if (width <= kTiledHeadDims)
    kernel::launch_blocks("fused_attention", device, blocks, TiledForward<T, 64>{heads, scale, o, lse});
  else
    kernel::launch("fused_attention", device, D.B * D.H * D.nq, ForwardKernel<T>{heads, scale, o, lse});
}

template <class T> void attention_backward(const AttentionShape& D, const AttentionMaskView& masks, T scale, const T* q,
                                           const T* k, const T* v, const T* o, const double* lse, const T* go, T* gq,
                                           T* gk, T* gv, Device device) {
  Tensor Drow = Tensor::empty({D.B * D.H * D.nq}, DType::Float64, device);
  double* pd = Drow.device_data<double>();
  kernel::launch("fused_attention_row_dot", device, D.B * D.H * D.nq, RowDotKernel<T>{o, go, pd, D});
  const Heads<T> heads{q, k, v, D, masks};
  const int64_t width = D.d > D.dv ? D.d : D.dv, query_blocks = D.B * D.H * tiles_of<T>(D.nq),
                key_blocks = D.B * D.H * tiles_of<T>(D.nk);
  if (width <= 32) {
    kernel::launch_blocks("fused_attention_dq", device, query_blocks,
                          TiledQueryGrads<T, 32>{{heads, scale, go, lse, pd}, gq});
    kernel::launch_blocks("fused_attention_dkv", device, key_blocks,
                          TiledKeyGrads<T, 32>{{heads, scale, go, lse, pd}, gk, gv});
  } else if (width <= kTiledHeadDims) {
    kernel::launch_blocks("fused_attention_dq", device, query_blocks,
                          TiledQueryGrads<T, 64>{{heads, scale, go, lse, pd}, gq});
    kernel::launch_blocks("fused_attention_dkv", device, key_blocks,
                          TiledKeyGrads<T, 64>{{heads, scale, go, lse, pd}, gk, gv});
  } else {
    Probabilities<T> P{heads, scale, go, lse, pd};
    kernel::launch("fused_attention_dq", device, D.B * D.H * D.nq, QueryGradKernel<T>{P, gq});
    kernel::launch("fused_attention_dkv", device, D.B * D.H * D.nk, KeyGradKernel<T>{P, gk, gv});
  }
}

template void attention_forward<float>(const AttentionShape&, const AttentionMaskView&, float, const float*,
                                       const float*, const float*, float*, double*, Device);
template void attention_forward<double>(const AttentionShape&, const AttentionMaskView&, double, const double*,
                                        const double*, const double*, double*, double*, Device);
template void attention_backward<float>(const AttentionShape&, const AttentionMaskView&, float, const float*,
                                        const float*, const float*, const float*, const double*, const float*, float*,
                                        float*, float*, Device);
template void attention_backward<double>(const AttentionShape&, const AttentionMaskView&, double, const double*,
                                         const double*, const double*, const double*, const double*, const double*,
                                         double*, double*, double*, Device);

}  // namespace qkv::device
