// Device kernels of fused attention: the math of attention.cpp, one query or
// key row per thread (the plain reference form; tiled tensor-core kernels
// are to be measured against it).
//
// Forward, one thread per (batch, head, query i), an online softmax over the
// keys query i may see: s_j = scale·q_i·k_j + masks; m' = max(m, s_j);
// l = l·e^(m−m') + e^(s_j−m');  o = o·e^(m−m') + e^(s_j−m')·v_j;  finally
// o /= l and L = m + log l (a fully masked row gives zeros and L = −∞).
// Backward, recomputing p_ij = exp(s_ij − L_i), with D_i = Σ dO_i ⊙ O_i:
//   dQ_i = scale·Σ_j p_ij (dO_i·v_j − D_i) k_j            (one thread per query)
//   dV_j = Σ_i p_ij dO_i;  dK_j = scale·Σ_i p_ij (dO_i·v_j − D_i) q_i   (one per key)
// Each thread owns the rows it writes, so there are no atomics and the sums
// are the same on every run.
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
    const T kNegInf = -std::numeric_limits<T>::infinity();
    if (!masks.rules.sees(i, j)) return kNegInf;
    if (masks.padding && !masks.padding[b * D.nk + j]) return kNegInf;
    const T *qi = q_row(b, h, i), *kj = k_row(b, h, j);
    T s = 0;
    for (int64_t c = 0; c < D.d; ++c) s += qi[c] * kj[c];
    s *= scale;
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

}  // namespace

template <class T> void attention_forward(const AttentionShape& D, const AttentionMaskView& masks, T scale, const T* q,
                                          const T* k, const T* v, T* o, double* lse, Device device) {
  kernel::launch("fused_attention", device, D.B * D.H * D.nq,
                 ForwardKernel<T>{Heads<T>{q, k, v, D, masks}, scale, o, lse});
}

template <class T> void attention_backward(const AttentionShape& D, const AttentionMaskView& masks, T scale, const T* q,
                                           const T* k, const T* v, const T* o, const double* lse, const T* go, T* gq,
                                           T* gk, T* gv, Device device) {
  Tensor Drow = Tensor::empty({D.B * D.H * D.nq}, DType::Float64, device);
  double* pd = Drow.device_data<double>();
  kernel::launch("fused_attention_row_dot", device, D.B * D.H * D.nq, RowDotKernel<T>{o, go, pd, D});
  Probabilities<T> P{Heads<T>{q, k, v, D, masks}, scale, go, lse, pd};
  kernel::launch("fused_attention_dq", device, D.B * D.H * D.nq, QueryGradKernel<T>{P, gq});
  kernel::launch("fused_attention_dkv", device, D.B * D.H * D.nk, KeyGradKernel<T>{P, gk, gv});
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
