// Linear attention (Katharopoulos et al. 2020): forward and backward side by side.
//
// With φ(x) = elu(x) + 1, Q_i = φ(q_i), K_j = φ(k_j) and the sums over the
// keys a query sees (j ≤ i when causal, every j otherwise)
//   S_i = Σ_j K_jᵀ v_j  [d, d_v],   z_i = Σ_j K_j  [d],
//   out_i = Q_i·S_i / (Q_i·z_i + ε)                          O(n·d·d_v), no [n, n].
// Backward, with g_i = dL/dout_i and den_i = Q_i·z_i + ε:
//   a_i = g_i / den_i (dL/dnumerator),  c_i = −(g_i·out_i) / den_i (dL/dden_i),
//   dQ_i = S_i·a_i + c_i·z_i                     (a forward sweep rebuilds S_i, z_i)
//   R_j = Σ_{i sees j} Q_iᵀ a_i,  r_j = Σ_{i sees j} c_i Q_i   (a reverse sweep)
//   dK_j = R_j·v_j + r_j,   dv_j = K_j·R_j,
//   dq = dQ ⊙ φ'(q), dk = dK ⊙ φ'(k), φ'(x) = 1 for x > 0, eˣ otherwise.
// Padded keys (key_padding false) contribute nothing: K_j = 0 for them.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/parallel.h"

namespace qkv {

QKV_DECLARE_OP(linear_attention);

namespace {

template <class T> T phi(T x) { return x > 0 ? x + 1 : std::exp(x); }
template <class T> T phi_grad(T x) { return x > 0 ? T(1) : std::exp(x); }

using LinearDims = device::LinearShape;

// φ of one head's row into `out` (zeros for a padded key).
template <class T> void phi_row(const T* x, int64_t d, bool keep, double* out) {
  for (int64_t a = 0; a < d; ++a) out[a] = keep ? phi(x[a]) : 0.0;
}

// The running sums over keys: S += K_jᵀ v_j, z += K_j (K = φ(k_j), 0 for a padded key).
// One function for the forward pass and the backward's replay, so both sum alike.
struct KeySums {
  std::vector<double> S, z, K;
  explicit KeySums(const LinearDims& D) : S(D.d * D.dv), z(D.d), K(D.d) {}
  void clear() {
    std::fill(S.begin(), S.end(), 0.0);
    std::fill(z.begin(), z.end(), 0.0);
  }
  template <class T>
  void add(const LinearDims& D, const bool* padding, const T* k, const T* v, int64_t b, int64_t h, int64_t j) {
    phi_row(k + (b * D.n + j) * D.H * D.d + h * D.d, D.d, !padding || padding[b * D.n + j], K.data());
    const T* vj = v + (b * D.n + j) * D.H * D.dv + h * D.dv;
    for (int64_t a = 0; a < D.d; ++a) {
      z[a] += K[a];
      for (int64_t c = 0; c < D.dv; ++c) S[a * D.dv + c] += K[a] * vj[c];
    }
  }
};

// Walks the queries of head (b, h) in order with `sums` holding what query i
// sees (keys j <= i when causal, all keys otherwise) when on_query(i) runs.
template <class T, class F> void sweep_queries(const LinearDims& D, const bool* padding, const T* k, const T* v,
                                               int64_t b, int64_t h, KeySums& sums, F on_query) {
  sums.clear();
  if (!D.causal)
    for (int64_t j = 0; j < D.n; ++j) sums.add(D, padding, k, v, b, h, j);
  for (int64_t i = 0; i < D.n; ++i) {
    if (D.causal) sums.add(D, padding, k, v, b, h, i);
    on_query(i);
  }
}

template <class T>
void forward(const LinearDims& D, const bool* padding, const T* q, const T* k, const T* v, T* o, double* den) {
  const int64_t ld = D.H * D.d, ldv = D.H * D.dv;
  parallel_for(D.B * D.H, D.n * D.d * D.dv * 4, [&](int64_t begin, int64_t end) {
    KeySums sums(D);
    const std::vector<double>&S = sums.S, &z = sums.z;
    std::vector<double> Q(D.d);
    for (int64_t item = begin; item < end; ++item) {
      int64_t b = item / D.H, h = item % D.H;
      sweep_queries(D, padding, k, v, b, h, sums, [&](int64_t i) {
        phi_row(q + (b * D.n + i) * ld + h * D.d, D.d, true, Q.data());
        double dn = D.eps;
        for (int64_t a = 0; a < D.d; ++a) dn += Q[a] * z[a];
        den[item * D.n + i] = dn;
        T* oi = o + (b * D.n + i) * ldv + h * D.dv;
        for (int64_t c = 0; c < D.dv; ++c) {
          double num = 0;
          for (int64_t a = 0; a < D.d; ++a) num += Q[a] * S[a * D.dv + c];
          oi[c] = static_cast<T>(num / dn);
        }
      });
    }
  });
}

template <class T> void backward(const LinearDims& D, const bool* padding, const T* q, const T* k, const T* v,
                                 const T* o, const double* den, const T* g, T* gq, T* gk, T* gv) {
  const int64_t ld = D.H * D.d, ldv = D.H * D.dv;
  parallel_for(D.B * D.H, D.n * D.d * D.dv * 8, [&](int64_t begin, int64_t end) {
    KeySums sums(D);
    const std::vector<double>&S = sums.S, &z = sums.z;
    std::vector<double> R(D.d * D.dv), r(D.d), Q(D.d), K(D.d), A(D.dv);
    std::vector<double> c_all(D.n);
    for (int64_t item = begin; item < end; ++item) {
      int64_t b = item / D.H, h = item % D.H;
      auto keep = [&](int64_t j) { return !padding || padding[b * D.n + j]; };
      // a_i and c_i for every query
      auto grads_of_query = [&](int64_t i, double* a) {
        const T *gi = g + (b * D.n + i) * ldv + h * D.dv, *oi = o + (b * D.n + i) * ldv + h * D.dv;
        double dn = den[item * D.n + i], go = 0;
        for (int64_t c = 0; c < D.dv; ++c) {
          a[c] = gi[c] / dn;
          go += static_cast<double>(gi[c]) * oi[c];
        }
        return -go / dn;
      };
      // Forward sweep: dQ_i = S_i·a_i + c_i·z_i.
      sweep_queries(D, padding, k, v, b, h, sums, [&](int64_t i) {
        double ci = c_all[i] = grads_of_query(i, A.data());
        const T* qi = q + (b * D.n + i) * ld + h * D.d;
        T* gqi = gq + (b * D.n + i) * ld + h * D.d;
        for (int64_t a = 0; a < D.d; ++a) {
          double s = ci * z[a];
          for (int64_t c = 0; c < D.dv; ++c) s += S[a * D.dv + c] * A[c];
          gqi[a] = static_cast<T>(s * phi_grad(qi[a]));
        }
      });
      // Reverse sweep (or, not causal, the sums over every query): R_j, r_j, then dK_j and dv_j.
      std::fill(R.begin(), R.end(), 0.0);
      std::fill(r.begin(), r.end(), 0.0);
      auto add_query = [&](int64_t i) {
        grads_of_query(i, A.data());
        phi_row(q + (b * D.n + i) * ld + h * D.d, D.d, true, Q.data());
        for (int64_t a = 0; a < D.d; ++a) {
          r[a] += c_all[i] * Q[a];
          for (int64_t c = 0; c < D.dv; ++c) R[a * D.dv + c] += Q[a] * A[c];
        }
      };
      if (!D.causal)
        for (int64_t i = 0; i < D.n; ++i) add_query(i);
      for (int64_t j = D.n - 1; j >= 0; --j) {
        if (D.causal) add_query(j);
        const T *kj = k + (b * D.n + j) * ld + h * D.d, *vj = v + (b * D.n + j) * ldv + h * D.dv;
        T *gkj = gk + (b * D.n + j) * ld + h * D.d, *gvj = gv + (b * D.n + j) * ldv + h * D.dv;
        if (!keep(j)) continue;  // a padded key: zero gradients (gk, gv start at zero)
        phi_row(kj, D.d, true, K.data());
        for (int64_t a = 0; a < D.d; ++a) {
          double s = r[a];
          for (int64_t c = 0; c < D.dv; ++c) s += R[a * D.dv + c] * vj[c];
          gkj[a] = static_cast<T>(s * phi_grad(kj[a]));
        }
        for (int64_t c = 0; c < D.dv; ++c) {
          double s = 0;
          for (int64_t a = 0; a < D.d; ++a) s += K[a] * R[a * D.dv + c];
          gvj[c] = static_cast<T>(s);
        }
      }
    }
  });
}

}  // namespace

Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, const Tensor& key_padding,
                        double eps) {
  common_device("linear_attention", {q, k, v, key_padding});
  QKV_CHECK(q.dim() == 4 && k.shape() == q.shape() && v.dim() == 4 && v.size(0) == q.size(0) &&
                v.size(1) == q.size(1) && v.size(2) == q.size(2),
            "linear_attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
            " must be [B, n, heads, d], [B, n, heads, d], [B, n, heads, d_v]");
  QKV_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "linear_attention: q, k, v dtypes differ");
  QKV_CHECK(eps > 0, "linear_attention: eps must be > 0, got ", eps);
  LinearDims D{q.size(0), q.size(1), q.size(2), q.size(3), v.size(3), causal, eps};
  if (key_padding.defined())
    QKV_CHECK(key_padding.dtype() == DType::Bool && (key_padding.shape() == Shape{D.B, D.n}),
              "linear_attention: key_padding must be bool [", D.B, ", ", D.n, "], got ",
              dtype_name(key_padding.dtype()), " ", shape_str(key_padding.shape()));
  const Device device = q.device();
  const bool* padding = key_padding.defined() ? key_padding.device_data<bool>() : nullptr;  // on q's device
  Tensor out = Tensor::empty({D.B, D.n, D.H, D.dv}, q.dtype(), device);
  Tensor den = Tensor::empty({D.B * D.H * D.n}, DType::Float64, device);
  dispatch_floating(q.dtype(), "linear_attention", [&](auto zero) {
    using T = decltype(zero);
    const T *pq = q.device_data<T>(), *pk = k.device_data<T>(), *pv = v.device_data<T>();
    if (device.is_cpu())
      forward<T>(D, padding, pq, pk, pv, out.data<T>(), den.data<double>());
    else
      device::linear_attention_forward<T>(D, padding, pq, pk, pv, out.device_data<T>(), den.device_data<double>(),
                                          device);
  });
  if (needs_grad({q, k, v}))
    record("linear_attention", out, {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), o = out.detach(), key_padding, D,
            den](const Tensor& g) -> std::vector<Tensor> {
             const Device device = q.device();
             const bool* padding = key_padding.defined() ? key_padding.device_data<bool>() : nullptr;
             Tensor gq = Tensor::zeros(q.shape(), q.dtype(), device), gk = Tensor::zeros(k.shape(), k.dtype(), device),
                    gv = Tensor::zeros(v.shape(), v.dtype(), device);
             dispatch_floating(q.dtype(), "linear_attention", [&](auto zero) {
               using T = decltype(zero);
               const T *pq = q.device_data<T>(), *pk = k.device_data<T>(), *pv = v.device_data<T>(),
                       *po = o.device_data<T>(), *pg = g.device_data<T>();
               const double* pden = den.device_data<double>();
               T *gpq = gq.device_data<T>(), *gpk = gk.device_data<T>(), *gpv = gv.device_data<T>();
               if (device.is_cpu())
                 backward<T>(D, padding, pq, pk, pv, po, pden, pg, gpq, gpk, gpv);
               else
                 device::linear_attention_backward<T>(D, padding, pq, pk, pv, po, pden, pg, gpq, gpk, gpv, device);
             });
             return {gq, gk, gv};
           });
  return out;
}

}  // namespace qkv
