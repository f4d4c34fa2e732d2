// Fused attention kernels: forward and backward of softmax(q·kᵀ·s + masks)·v
// in one op, tiled so no [n_q, n_k] matrix is ever kept.
#pragma once

#include "autograd/tensor.h"

namespace qkv {

/// The masks of one fused attention call; each may be left out. A bool mask
/// means true = MAY ATTEND; a float mask is added to the scores (masks are
/// constants: they get no gradient). What any of them blocks is blocked.
struct AttentionMasks {
  Tensor mask;          // bool or float, broadcastable to [B, heads, n_q, n_k]
  Tensor key_padding;   // bool [B, n_k]: true for real keys
  bool causal = false;  // key j > query i is blocked (top-left aligned, as torch's is_causal)
  /// > 0: sliding-window (local) attention. Query i sees keys i − window ..
  /// i when causal, i − window .. i + window otherwise; blocks of keys outside
  /// the band are never computed, so time and memory grow as n·window.
  int64_t window = 0;
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
