// Internal: the device kernels' launchers, one block per op family (each
// defined in autograd/ops/<family>.cu). An op calls them for a tensor that
// is not on the CPU, after its own shape and dtype checks; each launcher
// allocates its outputs on the inputs' device and returns them. Plain C++:
// the CPU files include it without CUDA's headers.
#pragma once

#include <vector>

#include "autograd/ops/attention.h"
#include "autograd/ops/elementwise_math.h"
#include "autograd/ops/kernel.h"
#include "autograd/tensor.h"

namespace qkv::device {

// ---- elementwise.cu ----
/// f(a, b) with a and b broadcast to `shape`.
Tensor binary(math::Binary kind, const Tensor& a, const Tensor& b, const Shape& shape);
Tensor unary(math::Unary kind, double s, const Tensor& x);
/// gx = g·df(x, y).
Tensor unary_backward(math::Unary kind, double s, const Tensor& x, const Tensor& y, const Tensor& g);

// ---- shape.cu: outputs come allocated on the inputs' device ----
/// Every element of out = *element (its bits: any dtype).
void fill(const Tensor& out, const void* element);
/// out[i] = src[Σ index_d·strides_d] over out's dims (any dtype).
void strided_copy(const Tensor& src, const Tensor& out, const std::vector<int64_t>& strides);
/// dst[o, dst_start + j, :] = src[o, src_start + j, :] for j < len (any dtype).
void copy_rows(const Tensor& src, int64_t src_mid, int64_t src_start, const Tensor& dst, int64_t dst_mid,
               int64_t dst_start, int64_t outer, int64_t len, int64_t inner);
/// out[o, j, :] = x[o, index[j], :] (an index out of range: reported to
/// `fault`, zeros), and its backward gx[o, r, :] = Σ g[o, j, :] over the j
/// with index[j] = r, in order (gx written whole).
void index_select(const Tensor& x, const Tensor& index, const Tensor& out, int64_t outer, int64_t mid, int64_t inner,
                  const FaultReport& fault);
void index_select_backward(const Tensor& g, const Tensor& index, const Tensor& gx, int64_t outer, int64_t mid,
                           int64_t inner);
/// out[p] = x[p with dim d's coordinate index[p]] (out of range: reported,
/// zero), and its backward (adds onto a zeroed gx).
void gather(const Tensor& x, int64_t d, const Tensor& index, const Tensor& out, const FaultReport& fault);
void scatter_add(const Tensor& g, int64_t d, const Tensor& index, const Tensor& gx);
/// out = mask ? value : x and out = condition ? a : b, broadcast to out's shape.
void masked_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out);
void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out);

// ---- reduce.cu: x viewed as [outer, reduced, inner], out as [outer, inner] ----
void sum_block(const Tensor& x, const Tensor& out, int64_t reduced, int64_t inner);
/// out = scale·(x summed over its reduced dim), a block of threads per 32
/// outputs (In, Out: double to float or double), for kernels of other files.
template <class In, class Out>
void sum_tiles(Device device, const In* x, Out* out, int64_t outer, int64_t reduced, int64_t inner, double scale);
/// The max and its arg-max (int64, first on ties, NaN wins); the backward
/// routes g to the arg-max of a zeroed gx.
void max_block(const Tensor& x, const Tensor& out, const Tensor& argmax, int64_t reduced, int64_t inner);
void max_block_backward(const Tensor& g, const Tensor& argmax, const Tensor& gx, int64_t reduced, int64_t inner);
/// Mean over the first lengths[b] steps of x [B, T, ...], and its backward.
void masked_mean(const Tensor& x, const Tensor& lengths, const Tensor& out);
void masked_mean_backward(const Tensor& g, const Tensor& lengths, const Tensor& gx);

// ---- softmax.cu: rows along the middle dim of [outer, size, inner] ----
void softmax(const Tensor& x, const Tensor& y, int64_t size, int64_t inner, bool log);
void softmax_backward(const Tensor& y, const Tensor& g, const Tensor& gx, int64_t size, int64_t inner, bool log);

// ---- logical.cu ----
/// out = a and/or b (broadcast to out's shape), or not a (b unused).
void logic(math::Logic op, const Tensor& a, const Tensor& b, const Tensor& out);
/// out = x < value (less) or x == value, for float and int64 x.
void compare(const Tensor& x, double value, bool less, const Tensor& out);

// ---- attention.cu ----
/// Sizes and row strides of q, k, v as attention.cpp's AttentionDims (o and
/// dO are [B, n_q, H, d_v]).
struct AttentionShape {
  int64_t B, nq, nk, H, d, dv;
  int64_t ldq, ldk, ldv;
};
/// The masks as kernels read them, in place: a bool or float mask through
/// element strides broadcast to [B, H, n_q, n_k], key padding [B, n_k] (true:
/// a real key), and the position rules. The CPU kernel reads the same view.
struct AttentionMaskView {
  const void* mask = nullptr;
  bool mask_is_bool = false;
  int64_t sb = 0, sh = 0, si = 0, sj = 0;
  const bool* padding = nullptr;
  PositionRules rules;
};
template <class T> void attention_forward(const AttentionShape& D, const AttentionMaskView& masks, T scale, const T* q,
                                          const T* k, const T* v, T* o, double* lse, Device device);
/// Adds dQ, dK, dV onto gq, gk, gv (which have q's, k's and v's strides).
template <class T> void attention_backward(const AttentionShape& D, const AttentionMaskView& masks, T scale, const T* q,
                                           const T* k, const T* v, const T* o, const double* lse, const T* go, T* gq,
                                           T* gk, T* gv, Device device);

// ---- linear_attention.cu: q, k [B, n, H, d], v [B, n, H, d_v] ----
struct LinearShape {
  int64_t B, n, H, d, dv;
  bool causal;
  double eps;
};
template <class T> void linear_attention_forward(const LinearShape& D, const bool* padding, const T* q, const T* k,
                                                 const T* v, T* o, double* den, Device device);
/// Writes dq, dk, dv into zeroed gq, gk, gv.
template <class T> void linear_attention_backward(const LinearShape& D, const bool* padding, const T* q, const T* k,
                                                  const T* v, const T* o, const double* den, const T* g, T* gq, T* gk,
                                                  T* gv, Device device);

}  // namespace qkv::device
