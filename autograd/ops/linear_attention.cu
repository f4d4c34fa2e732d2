// Device kernels of linear attention: the same sums as linear_attention.cpp,
// written per row so that each thread owns what it writes. With
// w_ij = φ(q_i)·φ(k_j) (0 for a padded key) over the keys query i sees:
//   den_i = ε + Σ_j w_ij,   out_i = Σ_j w_ij v_j / den_i,
//   a_i = g_i / den_i,  c_i = −(g_i·out_i) / den_i,
//   dQ_i = Σ_j φ(k_j) (v_j·a_i + c_i),   dK_j = Σ_{i sees j} φ(q_i) (a_i·v_j + c_i),
//   dv_j = Σ_{i sees j} w_ij a_i,   dq = dQ ⊙ φ'(q),  dk = dK ⊙ φ'(k).
// This is the quadratic form of those sums: O(n²·d) work per head, no [n, n]
// memory. The CPU's running sums (O(n·d·d_v)) need a prefix scan across
// threads on a GPU, which is still to come; this form is its reference.
#include <cmath>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

template <class T> QKV_HD T phi(T x) { return x > 0 ? x + 1 : std::exp(x); }
template <class T> QKV_HD T phi_grad(T x) { return x > 0 ? T(1) : std::exp(x); }

template <class T> struct LinearHeads {
  const T* q;
  const T* k;
  const T* v;
  const bool* padding;  // [B, n], or null
  LinearShape D;

  QKV_HD const T* q_row(int64_t b, int64_t h, int64_t i) const { return q + ((b * D.n + i) * D.H + h) * D.d; }
  QKV_HD const T* k_row(int64_t b, int64_t h, int64_t j) const { return k + ((b * D.n + j) * D.H + h) * D.d; }
  QKV_HD int64_t v_at(int64_t b, int64_t h, int64_t j) const { return ((b * D.n + j) * D.H + h) * D.dv; }
  QKV_HD bool kept(int64_t b, int64_t j) const { return !padding || padding[b * D.n + j]; }
  // Keys query i sees: [0, i] when causal, all otherwise.
  QKV_HD int64_t end_key(int64_t i) const { return D.causal ? i + 1 : D.n; }
  // w_ij = φ(q_i)·φ(k_j), in double as the CPU's sums
  QKV_HD double w(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const T *qi = q_row(b, h, i), *kj = k_row(b, h, j);
    double s = 0;
    for (int64_t a = 0; a < D.d; ++a) s += static_cast<double>(phi(qi[a])) * phi(kj[a]);
    return s;
  }
};

// den_i and out_i, one query row per item
template <class T> struct ForwardKernel {
  LinearHeads<T> H;
  T* o;
  double* den;
  QKV_HD void operator()(int64_t item) const {
    const LinearShape& D = H.D;
    int64_t i = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H);
    T* oi = o + H.v_at(b, h, i);
    for (int64_t c = 0; c < D.dv; ++c) oi[c] = T(0);
    double dn = D.eps;
    for (int64_t j = 0; j < H.end_key(i); ++j) {
      if (!H.kept(b, j)) continue;
      double w = H.w(b, h, i, j);
      dn += w;
      const T* vj = H.v + H.v_at(b, h, j);
      for (int64_t c = 0; c < D.dv; ++c) oi[c] = static_cast<T>(oi[c] + w * vj[c]);
    }
    for (int64_t c = 0; c < D.dv; ++c) oi[c] = static_cast<T>(oi[c] / dn);
    den[(b * D.H + h) * D.n + i] = dn;
  }
};

// The backward's per-query coefficients: a_i = g_i / den_i (read on the fly) and c_i.
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

// Per pair (i, j): a_i·v_j + c_i, the factor both dQ_i and dK_j take.
template <class T> struct PairFactor {
  LinearHeads<T> H;
  const T* g;
  const double* den;
  const double* c;
  QKV_HD double at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    int64_t row = (b * H.D.H + h) * H.D.n + i;
    const T *gi = g + H.v_at(b, h, i), *vj = H.v + H.v_at(b, h, j);
    double s = 0;
    for (int64_t x = 0; x < H.D.dv; ++x) s += static_cast<double>(gi[x]) * vj[x];
    return s / den[row] + c[row];
  }
};

// dq_i, one query row per item
template <class T> struct QueryGradKernel {
  PairFactor<T> F;
  T* gq;
  QKV_HD void operator()(int64_t item) const {
    const LinearShape& D = F.H.D;
    int64_t i = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H);
    T* gqi = gq + ((b * D.n + i) * D.H + h) * D.d;
    const T* qi = F.H.q_row(b, h, i);
    for (int64_t a = 0; a < D.d; ++a) {
      double s = 0;
      for (int64_t j = 0; j < F.H.end_key(i); ++j)
        if (F.H.kept(b, j)) s += phi(F.H.k_row(b, h, j)[a]) * F.at(b, h, i, j);
      gqi[a] = static_cast<T>(s * phi_grad(qi[a]));
    }
  }
};

// dk_j and dv_j, one key row per item (zero for a padded key)
template <class T> struct KeyGradKernel {
  PairFactor<T> F;
  T* gk;
  T* gv;
  QKV_HD void operator()(int64_t item) const {
    const LinearShape& D = F.H.D;
    int64_t j = item % D.n, h = item / D.n % D.H, b = item / (D.n * D.H);
    T* gkj = gk + ((b * D.n + j) * D.H + h) * D.d;
    T* gvj = gv + F.H.v_at(b, h, j);
    if (!F.H.kept(b, j)) return;  // gk, gv start at zero
    const T* kj = F.H.k_row(b, h, j);
    int64_t first = D.causal ? j : 0;
    for (int64_t a = 0; a < D.d; ++a) {
      double s = 0;
      for (int64_t i = first; i < D.n; ++i) s += phi(F.H.q_row(b, h, i)[a]) * F.at(b, h, i, j);
      gkj[a] = static_cast<T>(s * phi_grad(kj[a]));
    }
    for (int64_t x = 0; x < D.dv; ++x) {
      double s = 0;
      for (int64_t i = first; i < D.n; ++i)
        s += F.H.w(b, h, i, j) * F.g[F.H.v_at(b, h, i) + x] / F.den[(b * D.H + h) * D.n + i];
      gvj[x] = static_cast<T>(s);
    }
  }
};

}  // namespace

template <class T> void linear_attention_forward(const LinearShape& D, const bool* padding, const T* q, const T* k,
                                                 const T* v, T* o, double* den, Device device) {
  kernel::launch("linear_attention", device, D.B * D.H * D.n, ForwardKernel<T>{{q, k, v, padding, D}, o, den});
}

template <class T> void linear_attention_backward(const LinearShape& D, const bool* padding, const T* q, const T* k,
                                                  const T* v, const T* o, const double* den, const T* g, T* gq, T* gk,
                                                  T* gv, Device device) {
  Tensor c = Tensor::empty({D.B * D.H * D.n}, DType::Float64, device);
  kernel::launch("linear_attention_coefficients", device, D.B * D.H * D.n,
                 QueryCoefficients<T>{o, g, den, c.device_data<double>(), D});
  PairFactor<T> F{{q, k, v, padding, D}, g, den, c.device_data<double>()};
  kernel::launch("linear_attention_dq", device, D.B * D.H * D.n, QueryGradKernel<T>{F, gq});
  kernel::launch("linear_attention_dkv", device, D.B * D.H * D.n, KeyGradKernel<T>{F, gk, gv});
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
