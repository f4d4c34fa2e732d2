// Fused attention kernels: forward and backward of softmax(q·kᵀ·s + masks)·v
// in one op, tiled so no [n_q, n_k] matrix is ever kept.
#pragma once

#include <cstdint>

#include "autograd/ops/host_device.h"
#include "autograd/tensor.h"

namespace qkv {

/// The position rules of attention's masks (causal, a sliding window, and
/// where the queries stand among the keys), written once for every reader:
/// the dense masks of the composed path, the CPU kernel's blocks of rows and
/// keys, and the device kernels' rows (QKV_HD: host and GPU).
struct PositionRules {
  bool causal = false;
  int64_t window = 0;
  int64_t query_offset = 0;

  /// Whether query i may see key j: it stands at p = i + query_offset; causal
  /// blocks keys after p, a window keys before p − window (and, not causal,
  /// after p + window).
  QKV_HD bool sees(int64_t i, int64_t j) const {
    const int64_t p = i + query_offset;
    if (causal && j > p) return false;
    return window <= 0 || (j >= p - window && (causal || j <= p + window));
  }
  /// The keys that queries [i0, i1) may see: [first_key(i0), end_key(i1, n_k)), within [0, n_k).
  QKV_HD int64_t first_key(int64_t i0) const {
    return window > 0 && i0 + query_offset - window > 0 ? i0 + query_offset - window : 0;
  }
  QKV_HD int64_t end_key(int64_t i1, int64_t nk) const {
    const int64_t end = causal ? i1 + query_offset : window > 0 ? i1 + query_offset + window : nk;
    return end < nk ? end : nk;
  }
  /// The queries that may see keys [j0, j1): [first_query(j0), end_query(j1, n_q)), within [0, n_q).
  QKV_HD int64_t first_query(int64_t j0) const {
    const int64_t first = causal ? j0 - query_offset : window > 0 ? j0 - query_offset - window : 0;
    return first > 0 ? first : 0;
  }
  QKV_HD int64_t end_query(int64_t j1, int64_t nq) const {
    if (window <= 0) return nq;
    const int64_t end = j1 - query_offset + window;
    return end < 0 ? 0 : end < nq ? end : nq;
  }
};

/// Which keys each query may see: the one place attention's masking rules
/// live. The fused kernels' block bounds, the composed path's mask
/// (nn::causal_mask, nn::window_mask, MultiHeadAttention) and decoding with
/// a cache all ask it. Each part may be left out, and what any part blocks
/// is blocked. A bool mask means true = MAY ATTEND; a float mask is added to
/// the scores (masks are constants: they get no gradient). A query whose
/// keys are all blocked gets zero weights: zeros out, zero gradients.
struct AttentionMasks {
  Tensor mask;          // bool or float, broadcastable to [B, heads, n_q, n_k]
  Tensor key_padding;   // bool [B, n_k]: true for real keys
  bool causal = false;  // key j > query i is blocked (top-left aligned, as torch's is_causal)
  /// > 0: sliding-window (local) attention. Query i sees keys i − window ..
  /// i when causal, i − window .. i + window otherwise; blocks of keys outside
  /// the band are never computed, so time and memory grow as n·window.
  int64_t window = 0;
  /// Query i stands at position query_offset + i among the keys: decoding
  /// with a cache, the new queries come after the cached keys.
  int64_t query_offset = 0;

  /// Its position rules (causal, window, offset), as the kernels read them.
  PositionRules rules() const { return {causal, window, query_offset}; }
  /// The position rules as a bool [n_q, n_k] mask (undefined when there are
  /// none): what the composed path merges with `mask` and `key_padding`.
  Tensor position_mask(int64_t nq, int64_t nk) const;
  /// The same masks with their tensors on `device` (an op's inputs and masks share one device).
  AttentionMasks to(Device device) const;
};

/// softmax(q·kᵀ·scale + masks)·v for every batch entry and head, with the
/// heads interleaved as a projection leaves them: q [B, n_q, H, d],
/// k [B, n_k, H, d], v [B, n_k, H, d_v] -> [B, n_q, H, d_v] (reshape to
/// [B, n_q, H·d_v] to merge the heads: no copy on either side). Tiled over
/// query and key blocks with an online softmax; saves only each row's
/// logsumexp for backward, which recomputes the weights. Causal blocks above
/// the diagonal are skipped. A query whose keys are all blocked gets zeros
/// (and zero gradients), never NaN. float32 and float64.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks, double scale);

/// fused_attention on q, k and v packed in one tensor qkv [B, n, 3, H, d] (the
/// output of one [3·H·d, C] projection, reshaped): -> [B, n, H, d]. Reads
/// each head in place and returns one gradient for the packed input.
Tensor fused_self_attention(const Tensor& qkv, const AttentionMasks& masks, double scale);

/// Linear attention (Katharopoulos et al. 2020) with φ(x) = elu(x) + 1:
/// out_i = φ(q_i)·S_i / (φ(q_i)·z_i + eps), S_i = Σ φ(k_j)ᵀv_j and z_i = Σ φ(k_j)
/// over the keys j ≤ i (causal) or all keys. O(n·d·d_v), no weight matrix
/// exists. q, k [B, n, H, d], v [B, n, H, d_v] -> [B, n, H, d_v]; keys
/// whose key_padding (bool [B, n]) is false contribute nothing, so a query
/// with no key left gets zeros. Its own backward: a forward and a reverse sweep.
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                        const Tensor& key_padding = Tensor(), double eps = 1e-6);

}  // namespace qkv
