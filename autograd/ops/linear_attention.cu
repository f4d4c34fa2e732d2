// Device kernels of linear attention: the CPU's sweeps (linear_attention.cpp)
// cut into chunks of kChunk rows, so that threads share them. With
// Q_i = φ(q_i), K_j = φ(k_j) (0 for a padded key), a_i = g_i / den_i and
// c_i = −(g_i·out_i) / den_i:
//   1. per chunk, the sums of its own rows: S = Σ_j K_jᵀ v_j [d, d_v], z = Σ_j K_j
//      (forward, and dQ's), R = Σ_i Q_iᵀ a_i, r = Σ_i c_i Q_i (dK's and dv's);
//   2. a scan over the chunks in order: each chunk's sums become those of every
//      chunk before it (keys: prefix) or after it (queries: suffix); without
//      the causal mask every chunk gets the sums of all rows;
//   3. per row, its chunk's scanned sums plus, when causal, the rows of its own
//      chunk it sees (the quadratic form over at most kChunk rows):
//        den_i = ε + Q_i·z + Σ w_ij,  out_i = (Q_i·S + Σ w_ij v_j) / den_i   (w_ij = Q_i·K_j)
//        dQ_i = S·a_i + c_i z + Σ_j K_j (v_j·a_i + c_i)
//        dK_j = R·v_j + r + Σ_i Q_i (a_i·v_j + c_i),   dv_j = K_j·R + Σ_i w_ij a_i
//      then dq = dQ ⊙ φ'(q), dk = dK ⊙ φ'(k).
// O(n·d·d_v) work like the CPU's (the per-row form before this was O(n²·d)),
// summed in double like the CPU's. Each item owns what it writes.
#include <cmath>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

constexpr int64_t kChunk = 64;

template <class T> QKV_HD T phi(T x) { return x > 0 ? x + 1 : std::exp(x); }
template <class T> QKV_HD T phi_grad(T x) { return x > 0 ? T(1) : std::exp(x); }

// Where rows live: q, k (and Q, K: φ of them, in double) as [B, n, H, d]; v, g, o as [B, n, H, dv];
// a chunk's sums at sums + ((b·H + h)·chunks + c)·W, W = d·dv + d (the matrix, then the vector).
struct Layout {
  LinearShape D;
  int64_t chunks, W;
  explicit Layout(const LinearShape& s) : D(s), chunks((s.n + kChunk - 1) / kChunk), W(s.d * s.dv + s.d) {}
  QKV_HD int64_t row(int64_t b, int64_t h, int64_t i) const { return (b * D.n + i) * D.H + h; }  // times d or dv
  QKV_HD int64_t sums_at(int64_t b, int64_t h, int64_t c) const { return ((b * D.H + h) * chunks + c) * W; }
  QKV_HD int64_t chunk_end(int64_t c) const { return c * kChunk + kChunk < D.n ? c * kChunk + kChunk : D.n; }
};

// Q = φ(q) and K = φ(k) (0 for a padded key), one element per item.
template <class T> struct PhiKernel {
  const T* q;
  const T* k;
  const bool* padding;
  double* Q;
  double* K;
  LinearShape D;
  QKV_HD void operator()(int64_t item) const {
    int64_t b = item / (D.n * D.H * D.d), j = item / (D.H * D.d) % D.n;
    Q[item] = phi(q[item]);
    K[item] = !padding || padding[b * D.n + j] ? static_cast<double>(phi(k[item])) : 0.0;
  }
};

// The backward's per-query coefficients c_i; a_i = g_i / den_i is read on the fly.
template <class T> struct QueryCoefficients {
  const T* o;
  const T* g;
  const double* den;
  double* c;
  LinearShape D;
  QKV_HD void operator()(int64_t item) const {
    int64_t i = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H);
    int64_t at = ((b * D.n + i) * D.H + h) * D.dv;
    double go = 0;
    for (int64_t x = 0; x < D.dv; ++x) go += static_cast<double>(g[at + x]) * o[at + x];
    c[item] = -go / den[item];
  }
};

// Step 1, one item per (b, h, chunk, a): row a of a chunk's matrix and entry a of its vector,
//   keys:    M[a][x] = Σ_j K_j[a] v_j[x],    m[a] = Σ_j K_j[a]
//   queries: M[a][x] = Σ_i Q_i[a] a_i[x],    m[a] = Σ_i c_i Q_i[a]
template <class T> struct ChunkSums {
  Layout L;
  const double* rows;  // K (keys) or Q (queries)
  const T* vec;        // v (keys) or g (queries)
  const double* den;   // queries: den_i (a_i = g_i / den_i); null for keys
  const double* c;     // queries: c_i; null for keys
  double* sums;
  QKV_HD void operator()(int64_t item) const {
    const LinearShape& D = L.D;
    int64_t a = item % D.d, chunk = item / D.d % L.chunks, h = item / (D.d * L.chunks) % D.H,
            b = item / (D.d * L.chunks * D.H);
    double* M = sums + L.sums_at(b, h, chunk);
    for (int64_t x = 0; x < D.dv; ++x) M[a * D.dv + x] = 0;
    double m = 0;
    for (int64_t i = chunk * kChunk; i < L.chunk_end(chunk); ++i) {
      int64_t r = L.row(b, h, i), line = (b * D.H + h) * D.n + i;
      double f = rows[r * D.d + a];
      if (f == 0) continue;  // a padded key
      double scale = den ? f / den[line] : f;
      for (int64_t x = 0; x < D.dv; ++x) M[a * D.dv + x] += scale * vec[r * D.dv + x];
      m += c ? c[line] * f : f;
    }
    M[D.d * D.dv + a] = m;
  }
};

// Step 2, one item per (b, h, entry of the sums): the chunks in order (keys: each gets the sum of
// those before it), in reverse (queries: of those after it), or, not causal, each gets the total.
struct ChunkScan {
  Layout L;
  double* sums;
  bool reverse;
  QKV_HD void operator()(int64_t item) const {
    int64_t e = item % L.W, bh = item / L.W;
    double* s = sums + bh * L.chunks * L.W + e;
    double run = 0;
    if (!L.D.causal) {
      for (int64_t c = 0; c < L.chunks; ++c) run += s[c * L.W];
      for (int64_t c = 0; c < L.chunks; ++c) s[c * L.W] = run;
      return;
    }
    for (int64_t n = 0; n < L.chunks; ++n) {
      int64_t c = reverse ? L.chunks - 1 - n : n;
      double own = s[c * L.W];
      s[c * L.W] = run;
      run += own;
    }
  }
};

// Step 3 of the forward, one query row per item: den_i and out_i.
template <class T> struct ForwardRows {
  Layout L;
  const double* Q;
  const double* K;
  const T* v;
  const double* S;  // the keys' scanned sums
  T* o;
  double* den;
  QKV_HD void operator()(int64_t item) const {
    const LinearShape& D = L.D;
    int64_t i = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H), chunk = i / kChunk;
    const double *Qi = Q + L.row(b, h, i) * D.d, *M = S + L.sums_at(b, h, chunk), *z = M + D.d * D.dv;
    double w[kChunk];  // w_ij for the rows of query i's own chunk it sees (causal only)
    int64_t first = chunk * kChunk, seen = D.causal ? i + 1 - first : 0;
    double dn = D.eps;
    for (int64_t a = 0; a < D.d; ++a) dn += Qi[a] * z[a];
    for (int64_t j = 0; j < seen; ++j) {
      const double* Kj = K + L.row(b, h, first + j) * D.d;
      w[j] = 0;
      for (int64_t a = 0; a < D.d; ++a) w[j] += Qi[a] * Kj[a];
      dn += w[j];
    }
    T* oi = o + L.row(b, h, i) * D.dv;
    for (int64_t x = 0; x < D.dv; ++x) {
      double num = 0;
      for (int64_t a = 0; a < D.d; ++a) num += Qi[a] * M[a * D.dv + x];
      for (int64_t j = 0; j < seen; ++j) num += w[j] * v[L.row(b, h, first + j) * D.dv + x];
      oi[x] = static_cast<T>(num / dn);
    }
    den[item] = dn;
  }
};

// What both of the backward's row kernels read: Q, K, v, the output's
// gradient g, den_i and c_i (a_i = g_i / den_i is read on the fly).
template <class T> struct BackwardRows {
  Layout L;
  const double* Q;
  const double* K;
  const T* v;
  const T* g;
  const double* den;
  const double* c;
};

// Step 3 of the backward for queries, one row per item: dq_i.
template <class T> struct QueryGradRows {
  BackwardRows<T> in;
  const T* q;
  const double* S;  // the keys' scanned sums
  T* gq;
  QKV_HD void operator()(int64_t item) const {
    const Layout& L = in.L;
    const LinearShape& D = L.D;
    const double *K = in.K, *den = in.den, *c = in.c;
    int64_t i = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H), chunk = i / kChunk;
    const double *M = S + L.sums_at(b, h, chunk), *z = M + D.d * D.dv;
    const T* gi = in.g + L.row(b, h, i) * D.dv;
    double f[kChunk];  // v_j·a_i + c_i for the rows of its own chunk query i sees (causal only)
    int64_t first = chunk * kChunk, seen = D.causal ? i + 1 - first : 0;
    for (int64_t j = 0; j < seen; ++j) {
      const T* vj = in.v + L.row(b, h, first + j) * D.dv;
      double s = 0;
      for (int64_t x = 0; x < D.dv; ++x) s += static_cast<double>(gi[x]) * vj[x];
      f[j] = s / den[item] + c[item];
    }
    const T* qi = q + L.row(b, h, i) * D.d;
    T* gqi = gq + L.row(b, h, i) * D.d;
    for (int64_t a = 0; a < D.d; ++a) {
      double s = c[item] * z[a];
      for (int64_t x = 0; x < D.dv; ++x) s += M[a * D.dv + x] * (gi[x] / den[item]);
      for (int64_t j = 0; j < seen; ++j) s += K[L.row(b, h, first + j) * D.d + a] * f[j];
      gqi[a] = static_cast<T>(s * phi_grad(qi[a]));
    }
  }
};

// Step 3 of the backward for keys, one row per item: dk_j and dv_j (zero for a padded key).
template <class T> struct KeyGradRows {
  BackwardRows<T> in;
  const T* k;
  const double* R;  // the queries' scanned sums
  T* gk;
  T* gv;
  const bool* padding;
  QKV_HD void operator()(int64_t item) const {
    const Layout& L = in.L;
    const LinearShape& D = L.D;
    const double *Q = in.Q, *K = in.K, *den = in.den, *c = in.c;
    const T *v = in.v, *g = in.g;
    int64_t j = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H), chunk = j / kChunk;
    if (padding && !padding[b * D.n + j]) return;  // gk, gv start at zero
    const double *M = R + L.sums_at(b, h, chunk), *r = M + D.d * D.dv, *Kj = K + L.row(b, h, j) * D.d;
    const T* vj = v + L.row(b, h, j) * D.dv;
    // a_i·v_j + c_i and w_ij for the rows i = j + n of its own chunk that see key j (causal only)
    double f[kChunk], w[kChunk];
    int64_t count = D.causal ? L.chunk_end(chunk) - j : 0;
    for (int64_t n = 0; n < count; ++n) {
      int64_t i = j + n, line = (b * D.H + h) * D.n + i;
      const T* gi = g + L.row(b, h, i) * D.dv;
      const double* Qi = Q + L.row(b, h, i) * D.d;
      double s = 0, dot = 0;
      for (int64_t x = 0; x < D.dv; ++x) s += static_cast<double>(gi[x]) * vj[x];
      for (int64_t a = 0; a < D.d; ++a) dot += Qi[a] * Kj[a];
      f[n] = s / den[line] + c[line];
      w[n] = dot;
    }
    const T* kj = k + L.row(b, h, j) * D.d;
    T *gkj = gk + L.row(b, h, j) * D.d, *gvj = gv + L.row(b, h, j) * D.dv;
    for (int64_t a = 0; a < D.d; ++a) {
      double s = r[a];
      for (int64_t x = 0; x < D.dv; ++x) s += M[a * D.dv + x] * vj[x];
      for (int64_t n = 0; n < count; ++n) s += Q[L.row(b, h, j + n) * D.d + a] * f[n];
      gkj[a] = static_cast<T>(s * phi_grad(kj[a]));
    }
    for (int64_t x = 0; x < D.dv; ++x) {
      double s = 0;
      for (int64_t a = 0; a < D.d; ++a) s += Kj[a] * M[a * D.dv + x];
      for (int64_t n = 0; n < count; ++n) {
        int64_t i = j + n;
        s += w[n] * g[L.row(b, h, i) * D.dv + x] / den[(b * D.H + h) * D.n + i];
      }
      gvj[x] = static_cast<T>(s);
    }
  }
};

// Q, K and one set of scanned sums (the keys'), on the device; steps 1 and 2.
struct Prepared {
  Tensor Q, K, S;
};
template <class T>
Prepared prepare(const Layout& L, const bool* padding, const T* q, const T* k, const T* v, Device device) {
  const LinearShape& D = L.D;
  Prepared p{Tensor::empty({D.B * D.n * D.H * D.d}, DType::Float64, device),
             Tensor::empty({D.B * D.n * D.H * D.d}, DType::Float64, device),
             Tensor::empty({D.B * D.H * L.chunks * L.W}, DType::Float64, device)};
  kernel::launch("linear_attention_phi", device, D.B * D.n * D.H * D.d,
                 PhiKernel<T>{q, k, padding, p.Q.device_data<double>(), p.K.device_data<double>(), D});
  kernel::launch("linear_attention_key_sums", device, D.B * D.H * L.chunks * D.d,
                 ChunkSums<T>{L, p.K.device_data<double>(), v, nullptr, nullptr, p.S.device_data<double>()});
  kernel::launch("linear_attention_key_scan", device, D.B * D.H * L.W, ChunkScan{L, p.S.device_data<double>(), false});
  return p;
}

}  // namespace

template <class T> void linear_attention_forward(const LinearShape& D, const bool* padding, const T* q, const T* k,
                                                 const T* v, T* o, double* den, Device device) {
  const Layout L(D);
  Prepared p = prepare(L, padding, q, k, v, device);
  kernel::launch(
      "linear_attention_rows", device, D.B * D.H * D.n,
      ForwardRows<T>{L, p.Q.device_data<double>(), p.K.device_data<double>(), v, p.S.device_data<double>(), o, den});
}

template <class T> void linear_attention_backward(const LinearShape& D, const bool* padding, const T* q, const T* k,
                                                  const T* v, const T* o, const double* den, const T* g, T* gq, T* gk,
                                                  T* gv, Device device) {
  const Layout L(D);
  Prepared p = prepare(L, padding, q, k, v, device);
  Tensor c = Tensor::empty({D.B * D.H * D.n}, DType::Float64, device);
  Tensor R = Tensor::empty({D.B * D.H * L.chunks * L.W}, DType::Float64, device);
  const double *Q = p.Q.device_data<double>(), *K = p.K.device_data<double>(), *S = p.S.device_data<double>();
  kernel::launch("linear_attention_coefficients", device, D.B * D.H * D.n,
                 QueryCoefficients<T>{o, g, den, c.device_data<double>(), D});
  kernel::launch("linear_attention_query_sums", device, D.B * D.H * L.chunks * D.d,
                 ChunkSums<T>{L, Q, g, den, c.device_data<double>(), R.device_data<double>()});
  kernel::launch("linear_attention_query_scan", device, D.B * D.H * L.W, ChunkScan{L, R.device_data<double>(), true});
  const BackwardRows<T> in{L, Q, K, v, g, den, c.device_data<double>()};
  kernel::launch("linear_attention_dq", device, D.B * D.H * D.n, QueryGradRows<T>{in, q, S, gq});
  kernel::launch("linear_attention_dkv", device, D.B * D.H * D.n,
                 KeyGradRows<T>{in, k, R.device_data<double>(), gk, gv, padding});
}

template void linear_attention_forward<float>(const LinearShape&, const bool*, const float*, const float*, const float*,
                                              float*, double*, Device);
template void linear_attention_forward<double>(const LinearShape&, const bool*, const double*, const double*,
                                               const double*, double*, double*, Device);
template void linear_attention_backward<float>(const LinearShape&, const bool*, const float*, const float*,
                                               const float*, const float*, const double*, const float*, float*, float*,
                                               float*, Device);
template void linear_attention_backward<double>(const LinearShape&, const bool*, const double*, const double*,
                                                const double*, const double*, const double*, const double*, double*,
                                                double*, double*, Device);

}  // namespace qkv::device
