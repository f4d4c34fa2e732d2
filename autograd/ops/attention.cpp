// Fused scaled-dot-product attention: forward and backward side by side.
//
// Forward, per (batch, head, block of query rows), over blocks of keys:
//   S = s·Q_i·K_jᵀ + masks;  m' = max(m, rowmax S);  P = exp(S − m');
//   l = l·e^(m−m') + rowsum P;  O = O·e^(m−m') + P·V_j;   finally O /= l and
//   the row's logsumexp L = m + log l is all that is saved.
// Backward, per (batch, head), recomputing P = exp(S − L) block by block:
//   D = rowsum(dO ⊙ O);  dV_j += Pᵀ·dO_i;  dP = dO_i·V_jᵀ;  dS = P ⊙ (dP − D);
//   dQ_i += s·dS·K_j;  dK_j += s·dSᵀ·Q_i.
// Every product is a BLAS gemm on the heads in place ([B, n, H, d] with
// leading dimension H·d), so heads are neither split nor merged by copies.
#include "autograd/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/matmul.h"
#include "autograd/parallel.h"
#include "autograd/simd.h"

namespace qkv {

QKV_DECLARE_OP(fused_attention);
QKV_DECLARE_OP(fused_self_attention);

namespace {

// Forward: 64 queries against up to 512 keys at a time (an online softmax
// across key blocks beyond that). Backward: 64 keys against up to 512
// queries. Few, fat BLAS calls; causal work skipped in 64-row steps.
constexpr int64_t kQueryBlock = 64, kKeyBlock = 512;
constexpr int64_t kBackwardKeys = 64, kBackwardQueries = 512;

// Sizes, and the row strides of q, k and v (H·d, H·d, H·d_v when each is its
// own [B, n, H, d] tensor; 3·H·d for all three inside a packed [B, n, 3, H, d]).
using AttentionDims = device::AttentionShape;

// The masks, read in place: the view the device kernels read, and n_k (the padding's row length).
struct MaskView : device::AttentionMaskView {
  int64_t nk = 0;
};

MaskView mask_view(const AttentionMasks& m, const AttentionDims& dims, DType dtype) {
  MaskView v;
  v.nk = dims.nk;
  QKV_CHECK(m.window >= 0, "fused_attention: window must be >= 0, got ", m.window);
  QKV_CHECK(m.query_offset >= 0, "fused_attention: query_offset must be >= 0, got ", m.query_offset);
  v.rules = m.rules();
  if (m.key_padding.defined()) {
    QKV_CHECK(m.key_padding.dtype() == DType::Bool && (m.key_padding.shape() == Shape{dims.B, dims.nk}),
              "fused_attention: key_padding must be bool [", dims.B, ", ", dims.nk, "], got ",
              dtype_name(m.key_padding.dtype()), " ", shape_str(m.key_padding.shape()));
    v.padding = m.key_padding.device_data<bool>();  // on q's device (common_device)
  }
  if (m.mask.defined()) {
    const Tensor& t = m.mask;
    QKV_CHECK(t.dtype() == DType::Bool || t.dtype() == dtype, "fused_attention: mask must be bool or ",
              dtype_name(dtype), ", got ", dtype_name(t.dtype()));
    QKV_CHECK(!t.requires_grad(),
              "fused_attention: a float mask that requires grad needs the composed path "
              "(nn::attention): the fused kernel treats masks as constants");
    Shape full{dims.B, dims.H, dims.nq, dims.nk};
    bool fits = t.dim() <= 4;
    for (int64_t i = 1; fits && i <= t.dim(); ++i) fits = t.size(-i) == 1 || t.size(-i) == full[4 - i];
    QKV_CHECK(fits, "fused_attention: mask ", shape_str(t.shape()),
              " does not broadcast to [B, heads, n_q, n_k] = ", shape_str(full));
    std::vector<int64_t> st(4, 0);
    int64_t stride = 1;
    for (int64_t i = 1; i <= t.dim(); ++i) {
      if (t.size(-i) != 1) st[4 - i] = stride;
      stride *= t.size(-i);
    }
    v.mask = t.device_raw_data();
    v.mask_is_bool = t.dtype() == DType::Bool;
    v.sb = st[0], v.sh = st[1], v.si = st[2], v.sj = st[3];
  }
  return v;
}

// S[r, c] (query i0 + r, key j0 + c) += masks; blocked -> -inf (S is already scaled).
template <class T> void apply_masks(T* S, int64_t rows, int64_t cols, int64_t ld, const MaskView& mv, int64_t b,
                                    int64_t h, int64_t i0, int64_t j0) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    T* s = S + r * ld;
    int64_t i = i0 + r;
    if (mv.mask) {
      int64_t base = b * mv.sb + h * mv.sh + i * mv.si + j0 * mv.sj;
      if (mv.mask_is_bool) {
        const bool* m = static_cast<const bool*>(mv.mask) + base;
        for (int64_t c = 0; c < cols; ++c)
          if (!m[c * mv.sj]) s[c] = kNegInf;
      } else {
        const T* m = static_cast<const T*>(mv.mask) + base;
        for (int64_t c = 0; c < cols; ++c) s[c] += m[c * mv.sj];
      }
    }
    if (mv.padding)
      for (int64_t c = 0; c < cols; ++c)
        if (!mv.padding[b * mv.nk + j0 + c]) s[c] = kNegInf;
    // The position rules (PositionRules::sees) as ranges: query i stands at p.
    const int64_t p = i + mv.rules.query_offset, window = mv.rules.window;
    if (mv.rules.causal)
      for (int64_t c = std::max<int64_t>(0, p - j0 + 1); c < cols; ++c) s[c] = kNegInf;
    if (window > 0) {  // keys before p − W, and (not causal) after p + W
      for (int64_t c = 0; c < std::min(cols, p - window - j0); ++c) s[c] = kNegInf;
      if (!mv.rules.causal)
        for (int64_t c = std::max<int64_t>(0, p + window + 1 - j0); c < cols; ++c) s[c] = kNegInf;
    }
  }
}

template <class T> T row_max(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return simd::max(x, n);
  } else {
    T top = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j)
      if (std::isnan(x[j]) || x[j] > top) top = x[j];
    return top;
  }
}

// x = exp(x − shift) in place; returns the row sum.
template <class T> double exp_in_place(T* x, T shift, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return simd::exp_shifted_sum(x, shift, x, n);
  } else {
    double total = 0;
    for (int64_t j = 0; j < n; ++j) total += (x[j] = std::exp(x[j] - shift));
    return total;
  }
}

template <class T> void forward(const AttentionDims& D, const MaskView& mv, T scale, const T* q, const T* k, const T* v,
                                T* o, double* lse) {
  const int64_t ldq = D.ldq, ldk = D.ldk, ldv = D.ldv, ldo = D.H * D.dv,
                qblocks = (D.nq + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = D.B * D.H * qblocks;
  parallel_for(items, std::min(kQueryBlock, D.nq) * D.nk * (D.d + D.dv), [&](int64_t begin, int64_t end) {
    std::unique_ptr<T[]> S(new T[kQueryBlock * kKeyBlock]);  // scratch: no zeroing (it cost a memset per call)
    std::vector<double> m(kQueryBlock), l(kQueryBlock);
    for (int64_t item = begin; item < end; ++item) {
      int64_t b = item / (D.H * qblocks), h = item / qblocks % D.H, i0 = item % qblocks * kQueryBlock;
      int64_t rows = std::min(kQueryBlock, D.nq - i0);
      const T* qi = q + (b * D.nq + i0) * ldq + h * D.d;
      T* oi = o + (b * D.nq + i0) * ldo + h * D.dv;
      for (int64_t r = 0; r < rows; ++r) std::fill(oi + r * ldo, oi + r * ldo + D.dv, T(0));
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0);
      for (int64_t j0 = mv.rules.first_key(i0), jend = mv.rules.end_key(i0 + rows, D.nk); j0 < jend; j0 += kKeyBlock) {
        int64_t cols = std::min(kKeyBlock, jend - j0);
        const T* kj = k + (b * D.nk + j0) * ldk + h * D.d;
        const T* vj = v + (b * D.nk + j0) * ldv + h * D.dv;
        gemm<T>(false, true, rows, cols, D.d, qi, ldq, kj, ldk, S.get(), kKeyBlock, T(0), scale);
        apply_masks(S.get(), rows, cols, kKeyBlock, mv, b, h, i0, j0);
        for (int64_t r = 0; r < rows; ++r) {
          T* s = S.get() + r * kKeyBlock;
          double block_max = row_max(s, cols);  // a NaN score poisons its row, as in softmax
          double top = std::isnan(block_max) || std::isnan(m[r]) ? NAN : std::max(m[r], block_max);
          if (top == -INFINITY) {  // every key so far blocked: nothing to add
            std::fill(s, s + cols, T(0));
            continue;
          }
          double correction = std::exp(m[r] - top);  // 0 when m was -inf
          l[r] = l[r] * correction + exp_in_place(s, static_cast<T>(top), cols);
          if (correction != 1.0)
            for (int64_t c = 0; c < D.dv; ++c) oi[r * ldo + c] = static_cast<T>(oi[r * ldo + c] * correction);
          m[r] = top;
        }
        gemm<T>(false, false, rows, D.dv, cols, S.get(), kKeyBlock, vj, ldv, oi, ldo, T(1));
      }
      for (int64_t r = 0; r < rows; ++r) {
        double* L = lse + (b * D.H + h) * D.nq + i0 + r;
        if (l[r] == 0) {  // fully masked row: zeros, and P = 0 in backward
          std::fill(oi + r * ldo, oi + r * ldo + D.dv, T(0));
          *L = -INFINITY;
          continue;
        }
        T inv = static_cast<T>(1.0 / l[r]);
        for (int64_t c = 0; c < D.dv; ++c) oi[r * ldo + c] *= inv;
        *L = m[r] + std::log(l[r]);
      }
    }
  });
}

template <class T> void backward(const AttentionDims& D, const MaskView& mv, T scale, const T* q, const T* k,
                                 const T* v, const T* o, const double* lse, const T* go, T* gq, T* gk, T* gv) {
  const int64_t ldq = D.ldq, ldk = D.ldk, ldv = D.ldv, ldo = D.H * D.dv;  // gradients share their input's strides
  // One thread per (batch, head): it alone writes that head's rows of dQ, dK, dV.
  parallel_for(D.B * D.H, D.nq * D.nk * (2 * D.d + 2 * D.dv), [&](int64_t begin, int64_t end) {
    std::unique_ptr<T[]> P(new T[kBackwardQueries * kBackwardKeys]), dS(new T[kBackwardQueries * kBackwardKeys]);
    std::vector<double> Drow(D.nq);
    for (int64_t item = begin; item < end; ++item) {
      int64_t b = item / D.H, h = item % D.H;
      const double* L = lse + item * D.nq;
      for (int64_t i = 0; i < D.nq; ++i) {
        const T *goi = go + (b * D.nq + i) * ldo + h * D.dv, *oi = o + (b * D.nq + i) * ldo + h * D.dv;
        double s = 0;
        for (int64_t c = 0; c < D.dv; ++c) s += static_cast<double>(goi[c]) * oi[c];
        Drow[i] = s;
      }
      for (int64_t j0 = 0; j0 < D.nk; j0 += kBackwardKeys) {
        int64_t cols = std::min(kBackwardKeys, D.nk - j0);
        const T* kj = k + (b * D.nk + j0) * ldk + h * D.d;
        const T* vj = v + (b * D.nk + j0) * ldv + h * D.dv;
        T* gkj = gk + (b * D.nk + j0) * ldk + h * D.d;
        T* gvj = gv + (b * D.nk + j0) * ldv + h * D.dv;
        // only the queries that can see these keys (causal, window)
        for (int64_t i0 = mv.rules.first_query(j0), iend = mv.rules.end_query(j0 + cols, D.nq); i0 < iend;
             i0 += kBackwardQueries) {
          int64_t rows = std::min(kBackwardQueries, iend - i0);
          const T* qi = q + (b * D.nq + i0) * ldq + h * D.d;
          const T* goi = go + (b * D.nq + i0) * ldo + h * D.dv;
          T* gqi = gq + (b * D.nq + i0) * ldq + h * D.d;
          gemm<T>(false, true, rows, cols, D.d, qi, ldq, kj, ldk, P.get(), kBackwardKeys, T(0), scale);
          apply_masks(P.get(), rows, cols, kBackwardKeys, mv, b, h, i0, j0);
          for (int64_t r = 0; r < rows; ++r) {
            T* p = P.get() + r * kBackwardKeys;
            if (L[i0 + r] == -INFINITY)
              std::fill(p, p + cols, T(0));
            else
              exp_in_place(p, static_cast<T>(L[i0 + r]), cols);
          }
          gemm<T>(true, false, cols, D.dv, rows, P.get(), kBackwardKeys, goi, ldo, gvj, ldv, T(1));
          gemm<T>(false, true, rows, cols, D.dv, goi, ldo, vj, ldv, dS.get(), kBackwardKeys, T(0));
          for (int64_t r = 0; r < rows; ++r) {
            T* ds = dS.get() + r * kBackwardKeys;
            const T* p = P.get() + r * kBackwardKeys;
            T d = static_cast<T>(Drow[i0 + r]);
            for (int64_t c = 0; c < cols; ++c) ds[c] = p[c] * (ds[c] - d);
          }
          gemm<T>(false, false, rows, D.d, cols, dS.get(), kBackwardKeys, kj, ldk, gqi, ldq, T(1), scale);
          gemm<T>(true, false, cols, D.d, rows, dS.get(), kBackwardKeys, qi, ldq, gkj, ldk, T(1), scale);
        }
      }
    }
  });
}

// The kernels of `device`: the blocked BLAS ones above on the CPU, attention.cu's elsewhere.
template <class T> void run_forward(Device device, const AttentionDims& D, const MaskView& mv, T scale, const T* q,
                                    const T* k, const T* v, T* o, double* lse) {
  if (device.is_cpu()) return forward<T>(D, mv, scale, q, k, v, o, lse);
  device::attention_forward<T>(D, mv, scale, q, k, v, o, lse, device);
}
template <class T> void run_backward(Device device, const AttentionDims& D, const MaskView& mv, T scale, const T* q,
                                     const T* k, const T* v, const T* o, const double* lse, const T* go, T* gq, T* gk,
                                     T* gv) {
  if (device.is_cpu()) return backward<T>(D, mv, scale, q, k, v, o, lse, go, gq, gk, gv);
  device::attention_backward<T>(D, mv, scale, q, k, v, o, lse, go, gq, gk, gv, device);
}

}  // namespace

Tensor AttentionMasks::position_mask(int64_t nq, int64_t nk) const {
  QKV_CHECK(nq >= 0 && nk >= 0 && window >= 0 && query_offset >= 0, "AttentionMasks: negative size ", nq, " x ", nk,
            ", window ", window, " or offset ", query_offset);
  if (!causal && window == 0) return Tensor();
  Tensor m = Tensor::empty({nq, nk}, DType::Bool);
  bool* p = m.data<bool>();
  const PositionRules position = rules();
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) p[i * nk + j] = position.sees(i, j);
  return m;
}

AttentionMasks AttentionMasks::to(Device device) const {
  AttentionMasks moved = *this;
  if (mask.defined()) moved.mask = mask.to(device);
  if (key_padding.defined()) moved.key_padding = key_padding.to(device);
  return moved;
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks, double scale) {
  common_device("fused_attention", {q, k, v, masks.mask, masks.key_padding});
  QKV_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "fused_attention: q ", shape_str(q.shape()), ", k ",
            shape_str(k.shape()), ", v ", shape_str(v.shape()), " must be [B, n, heads, d]");
  AttentionDims D{q.size(0), q.size(1), k.size(1), q.size(2), q.size(3), v.size(3), 0, 0, 0};
  D.ldq = D.H * D.d, D.ldk = D.H * D.d, D.ldv = D.H * D.dv;
  QKV_CHECK(k.size(0) == D.B && v.size(0) == D.B && k.size(2) == D.H && v.size(2) == D.H && k.size(3) == D.d &&
                v.size(1) == D.nk,
            "fused_attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()),
            " do not fit ([B, n_q, H, d], [B, n_k, H, d], [B, n_k, H, d_v])");
  QKV_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "fused_attention: q, k, v dtypes differ");
  MaskView mv = mask_view(masks, D, q.dtype());
  const Device device = q.device();
  Tensor out = Tensor::empty({D.B, D.nq, D.H, D.dv}, q.dtype(), device);
  Tensor lse = Tensor::empty({D.B * D.H * D.nq}, DType::Float64, device);  // each row's logsumexp
  dispatch_floating(q.dtype(), "fused_attention", [&](auto zero) {
    using T = decltype(zero);
    run_forward<T>(device, D, mv, static_cast<T>(scale), q.device_data<T>(), k.device_data<T>(), v.device_data<T>(),
                   out.device_data<T>(), lse.device_data<double>());
  });
  if (needs_grad({q, k, v}))
    record("fused_attention", out, {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), o = out.detach(), masks, D, lse,
            scale](const Tensor& g) -> std::vector<Tensor> {
             MaskView mv = mask_view(masks, D, q.dtype());
             const Device device = q.device();
             Tensor gq = Tensor::zeros(q.shape(), q.dtype(), device), gk = Tensor::zeros(k.shape(), k.dtype(), device),
                    gv = Tensor::zeros(v.shape(), v.dtype(), device);
             dispatch_floating(q.dtype(), "fused_attention", [&](auto zero) {
               using T = decltype(zero);
               run_backward<T>(device, D, mv, static_cast<T>(scale), q.device_data<T>(), k.device_data<T>(),
                               v.device_data<T>(), o.device_data<T>(), lse.device_data<double>(), g.device_data<T>(),
                               gq.device_data<T>(), gk.device_data<T>(), gv.device_data<T>());
             });
             return {gq, gk, gv};
           },
           {masks.mask, masks.key_padding});
  return out;
}

// The same kernels on one packed input: q, k and v are rows of qkv [B, n, 3, H, d]
// (a single [C, 3C] projection's output), read and differentiated in place.
Tensor fused_self_attention(const Tensor& qkv, const AttentionMasks& masks, double scale) {
  QKV_CHECK(qkv.dim() == 5 && qkv.size(2) == 3, "fused_self_attention: qkv ", shape_str(qkv.shape()),
            " must be [B, n, 3, heads, d]");
  AttentionDims D{qkv.size(0), qkv.size(1), qkv.size(1), qkv.size(3), qkv.size(4), qkv.size(4), 0, 0, 0};
  D.ldq = D.ldk = D.ldv = 3 * D.H * D.d;
  common_device("fused_self_attention", {qkv, masks.mask, masks.key_padding});
  MaskView mv = mask_view(masks, D, qkv.dtype());
  const Device device = qkv.device();
  Tensor out = Tensor::empty({D.B, D.nq, D.H, D.dv}, qkv.dtype(), device);
  Tensor lse = Tensor::empty({D.B * D.H * D.nq}, DType::Float64, device);
  const int64_t part = D.H * D.d;  // offset of k (and 2·part of v) within a row
  dispatch_floating(qkv.dtype(), "fused_self_attention", [&](auto zero) {
    using T = decltype(zero);
    const T* p = qkv.device_data<T>();
    run_forward<T>(device, D, mv, static_cast<T>(scale), p, p + part, p + 2 * part, out.device_data<T>(),
                   lse.device_data<double>());
  });
  if (needs_grad({qkv}))
    record("fused_self_attention", out, {qkv},
           [qkv = qkv.detach(), o = out.detach(), masks, D, lse, scale, part](const Tensor& g) -> std::vector<Tensor> {
             MaskView mv = mask_view(masks, D, qkv.dtype());
             const Device device = qkv.device();
             Tensor gqkv = Tensor::zeros(qkv.shape(), qkv.dtype(), device);
             dispatch_floating(qkv.dtype(), "fused_self_attention", [&](auto zero) {
               using T = decltype(zero);
               const T* p = qkv.device_data<T>();
               T* gp = gqkv.device_data<T>();
               run_backward<T>(device, D, mv, static_cast<T>(scale), p, p + part, p + 2 * part, o.device_data<T>(),
                               lse.device_data<double>(), g.device_data<T>(), gp, gp + part, gp + 2 * part);
             });
             return {gqkv};
           },
           {masks.mask, masks.key_padding});
  return out;
}

}  // namespace qkv
