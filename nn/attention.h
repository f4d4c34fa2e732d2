// Attention, in composable pieces: scoring functions, masks, the weighted
// sum, and hard (arg-max / sampled) attention for inspection.
//
// Masks: a bool mask means true = MAY ATTEND (as torch's
// scaled_dot_product_attention; the opposite of torch.nn.MultiheadAttention's
// masks). A float mask is added to the scores (0 = attend, -inf = blocked).
// A query whose keys are all blocked gets zero weights, a zero output and
// zero gradients, never NaN.
#pragma once

#include <functional>
#include <vector>

#include "autograd/generator.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace qkv::nn {

/// A scoring function: q [..., n_q, d_q], k [..., n_k, d_k] -> scores [..., n_q, n_k].
using ScoreFn = std::function<Tensor(const Tensor& q, const Tensor& k)>;

/// qᵀk for every query-key pair.
Tensor dot_score(const Tensor& q, const Tensor& k);
/// qᵀk / √d: the dot score scaled so its variance does not grow with d.
Tensor scaled_dot_score(const Tensor& q, const Tensor& k);

/// Additive (Bahdanau) score vᵀ tanh(W_q q + W_k k); parameters w_q.weight
/// [hidden, d_q], w_k.weight [hidden, d_k], w_v.weight [1, hidden].
class AdditiveScore : public Module {
 public:
  AdditiveScore(int64_t d_q, int64_t d_k, int64_t hidden, Generator* gen = nullptr);
  Tensor forward(const Tensor& q, const Tensor& k) const;
  Tensor operator()(const Tensor& q, const Tensor& k) const { return forward(q, k); }
  std::shared_ptr<Linear> w_q, w_k, w_v;
};

/// Bilinear (Luong "general") score qᵀ W k; parameter weight [d_q, d_k].
class BilinearScore : public Module {
 public:
  BilinearScore(int64_t d_q, int64_t d_k, Generator* gen = nullptr);
  Tensor forward(const Tensor& q, const Tensor& k) const;
  Tensor operator()(const Tensor& q, const Tensor& k) const { return forward(q, k); }
  Tensor weight;
};

/// bool [n_q, n_k], true where key j <= query i (top-left aligned, as torch's is_causal).
Tensor causal_mask(int64_t n_q, int64_t n_k);
/// bool [n_q, n_k], true where key j is within `window` of query i: i − window ≤ j ≤ i
/// when causal, |i − j| ≤ window otherwise (sliding-window attention's band).
Tensor window_mask(int64_t n_q, int64_t n_k, int64_t window, bool causal);
/// bool [B, n], true where position j < lengths[b]: the real tokens of padded sequences.
Tensor key_padding_mask(const std::vector<int64_t>& lengths, int64_t n);
/// One mask that blocks what either blocks. bool with bool stays bool (and);
/// anything with a float mask becomes a float mask (sum, bool false -> -inf).
/// Undefined masks are ignored. Shapes broadcast.
Tensor merge_masks(const Tensor& a, const Tensor& b);
/// scores with a mask applied (blocked -> -inf, or the float mask added); the
/// mask must broadcast to the scores' shape.
Tensor apply_mask(const Tensor& scores, const Tensor& mask);

struct AttentionResult {
  Tensor output;   // [..., n_q, d_v]
  Tensor weights;  // [..., n_q, n_k]: the probabilities, before dropout
};

/// softmax(score(q, k) masked) · v, with inverted dropout on the weights
/// (p = dropout_p, masks from gen). Batch dims broadcast.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreFn& score,
                          const Tensor& mask = Tensor(), double dropout_p = 0, Generator* gen = nullptr);

/// While one is alive, every attention() call on this thread attends with
/// edit(k, P) instead of its weights P (k counts the calls since the edit
/// began, from 0) and returns those. What a study intervenes with (scale a
/// head, perturb a weight); qkv's suite checks dL/dP against finite
/// differences through it. Edits do not nest.
class AttentionWeightsEdit {
 public:
  explicit AttentionWeightsEdit(std::function<Tensor(int64_t call, const Tensor& weights)> edit);
  ~AttentionWeightsEdit();
  AttentionWeightsEdit(const AttentionWeightsEdit&) = delete;
  AttentionWeightsEdit& operator=(const AttentionWeightsEdit&) = delete;
};

/// While one is alive, every scaled_dot_product_attention() call on this
/// thread hands `see` its number (from 0), its q [..., n_q, d] and k
/// [..., n_k, d] as they enter the score, and the score's scale 1/√d: each
/// score is scale·Σ_d q_d·k_d. A study keeps them (and, with retain_grad,
/// dL/dq and dL/dk) to show how each score is made. Taps do not nest.
class AttentionInputsTap {
 public:
  explicit AttentionInputsTap(std::function<void(int64_t call, const Tensor& q, const Tensor& k, double scale)> see);
  ~AttentionInputsTap();
  AttentionInputsTap(const AttentionInputsTap&) = delete;
  AttentionInputsTap& operator=(const AttentionInputsTap&) = delete;
};

/// While one is alive, every attention part on this thread forms its weights
/// P (none takes a fused kernel that skips them: attention_weights_wanted()
/// says so) and hands each P [..., n_q, n_k] to `see`, in call order:
/// attention() does it for every part built on it, and a part that forms its
/// weights another way calls report_attention_weights() with the very tensor
/// that weighs its values (its gradient is dL/dP). The one way qkv draws
/// maps, whatever computes them. Recordings do not nest.
class AttentionRecording {
 public:
  explicit AttentionRecording(std::function<void(const Tensor& weights)> see);
  ~AttentionRecording();
  AttentionRecording(const AttentionRecording&) = delete;
  AttentionRecording& operator=(const AttentionRecording&) = delete;
};

/// Whether an AttentionRecording or an AttentionWeightsEdit is alive on this
/// thread: an attention part then forms its weights P, whatever its fast
/// path (a fused kernel would skip the recording or the edit).
bool attention_weights_wanted();

/// Hands weights P [..., n_q, n_k] (after any AttentionWeightsEdit, as they
/// weigh the values) to this thread's AttentionRecording; nothing without one.
void report_attention_weights(const Tensor& weights);

/// The weights of every attention call `forward` makes, in order (an
/// AttentionRecording around it): [..., heads, n_q, n_k] each, graph kept.
std::vector<Tensor> record_attention(const std::function<void()>& forward);

/// Each head's Σ P ⊙ dL/dP, from attention weights P [..., heads, n_q, n_k]
/// and their gradient dL/dP, summed over all but the head axis. It is
/// dL/dξ for a gate ξ on the head's output (ξ·P·V, at ξ = 1): removing the
/// head changes the loss by about −that, and its absolute value is the
/// head's importance (Michel et al., 2019, "Are Sixteen Heads Really Better
/// than One?").
std::vector<double> head_gate_gradient(const Tensor& weights, const Tensor& grad);

/// attention() with the scaled dot score: softmax(q·kᵀ/√d + mask) · v.
AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& mask = Tensor(), double dropout_p = 0,
                                             Generator* gen = nullptr);

/// SingleHeadAttention's settings beyond its widths.
struct SingleHeadConfig {
  bool bias = false;         // biases on the three projections (the tutorials' qkv_bias)
  double dropout = 0;        // inverted dropout on the weights, in training mode
  int64_t kdim = 0;          // width of the key input; 0 means d_in
  int64_t vdim = 0;          // width of the value input; 0 means d_in
  Generator* gen = nullptr;  // initial weights (torch.nn.Linear's U(±1/√in)) and dropout masks
};

/// One attention head whose query/key width d_k and value width d_v differ
/// (the tutorials' SelfAttention(d_in, d_k, d_v)): q = query·W_qᵀ, k = key·W_kᵀ,
/// v = value·W_vᵀ, output softmax(q·kᵀ/√d_k + mask)·v, with no output
/// projection. Parameters q_proj.weight [d_k, d_in], k_proj.weight [d_k, kdim],
/// v_proj.weight [d_v, vdim] (and .bias when asked for); a tutorial's
/// nn.Parameter(d_in, d_out) used as x @ W is this weight transposed. As in
/// MultiHeadAttention, the key bias gets an exact zero gradient (it is
/// detached: grad() stays undefined).
class SingleHeadAttention : public Module {
 public:
  SingleHeadAttention(int64_t d_in, int64_t d_k, int64_t d_v, const SingleHeadConfig& config = {});
  /// Self-attention: x [..., n, d_in] -> output [..., n, d_v], weights [..., n, n].
  AttentionResult forward(const Tensor& x, const Tensor& mask = Tensor()) const;
  /// query [..., n_q, d_in] over key [..., n_k, kdim] with values from value
  /// [..., n_k, vdim]; mask (true = may attend, or added) broadcasts to [..., n_q, n_k].
  AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& mask = Tensor()) const;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj;

 private:
  double dropout_;
  Generator* gen_;
};

/// Single-query key-value attention att(q, (K, V)) = Σ_i softmax_i(score(q, k_i)) v_i:
/// query [d_q], keys [n, d_k], values [n, d_v] -> [d_v].
Tensor attend(const Tensor& query, const Tensor& keys, const Tensor& values, const ScoreFn& score = scaled_dot_score);

enum class HardMode { ArgMax, Sample };

struct HardAttentionResult {
  Tensor output;   // [..., n_q, d_v]: the chosen value row per query (zeros when fully masked)
  Tensor indices;  // int64 [..., n_q]: the chosen key per query (-1 when fully masked)
};

/// Hard attention for inspection: each query takes exactly one value row,
/// the arg-max of its weights or a draw from them. Not differentiable (the
/// result has no history). weights [..., n_q, n_k], v [..., n_k, d_v], same batch dims.
HardAttentionResult hard_attention(const Tensor& weights, const Tensor& v, HardMode mode = HardMode::ArgMax,
                                   Generator* gen = nullptr);

}  // namespace qkv::nn
