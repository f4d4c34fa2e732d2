// Multi-head attention with q/k/v/out projections (torch.nn.MultiheadAttention's
// parameters, named q_proj, k_proj, v_proj, out_proj).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "nn/attention.h"

namespace qkv::nn {

/// Which attention a layer computes: every key (full), a sliding window of
/// keys around each query (window:W, O(n·W)), or linear attention (O(n),
/// Katharopoulos et al.; no weight matrix exists, so no heatmaps, no dropout
/// on weights, no attn_mask; self-attention only).
struct AttentionKind {
  enum Type { Full, Window, Linear } type = Full;
  int64_t window = 0;  // Window: keys within this many positions (see window_mask())
  /// "full", "window:W" (W >= 1) or "linear"; throws on anything else.
  static AttentionKind parse(const std::string& text);
  std::string str() const;
  bool operator==(const AttentionKind&) const = default;
};

/// Masks for one call; bool masks mean true = MAY ATTEND (unlike torch's
/// MultiheadAttention, where true means blocked). Float masks are added.
struct MhaOptions {
  Tensor attn_mask;         // [n_q, n_k], [B, n_q, n_k] or [B, heads, n_q, n_k]
  Tensor key_padding_mask;  // [B, n_k]: true for real tokens (see key_padding_mask())
  bool causal = false;      // also block keys after the query (causal_mask())
  bool need_weights = false;
  AttentionKind kind;  // full by default
  /// May the fused kernel (autograd/ops/attention.h) run this call? It does
  /// unless the call must return the weights, drop out on them, or pass a
  /// gradient to a float mask, or a recording or an edit of the weights is
  /// alive (nn::attention_weights_wanted); the composed path (nn/attention.h)
  /// computes the same numbers. false compares the two, or draws each step
  /// (qkv graph).
  bool fused = true;
};

/// MultiHeadAttention's settings beyond its width and head count (the
/// keyword arguments of torch.nn.MultiheadAttention).
struct MhaConfig {
  double dropout = 0;        // on the attention weights, in training mode
  bool bias = true;          // a bias on each of the four projections
  int64_t kdim = 0;          // width of the key input; 0 means d_model
  int64_t vdim = 0;          // width of the value input; 0 means d_model
  Generator* gen = nullptr;  // draws the initial weights and dropout masks (default generator when null)
  /// Key/value heads (grouped-query attention, Ainslie et al. 2023): k_proj
  /// and v_proj give kv_heads heads, each shared by num_heads / kv_heads query
  /// heads, and a cache keeps kv_heads heads. 0 means num_heads.
  int64_t kv_heads = 0;
  /// Rotates self-attention's queries and keys [B, n, heads, head_dim] as at
  /// positions offset.. (nn/position.h's rope); null: none. Not applied to
  /// cross-attention.
  std::function<Tensor(const Tensor& heads, int64_t offset)> rotate;
};

class MultiHeadAttention : public Module {
 public:
  /// d_model must divide by num_heads; dropout applies to the attention
  /// weights in training mode, with masks drawn from gen (default generator when null).
  MultiHeadAttention(int64_t d_model, int64_t num_heads, double dropout = 0, bool bias = true,
                     Generator* gen = nullptr);
  /// With key and value inputs of other widths, e.g.
  /// MultiHeadAttention(16, 4, {.kdim = 6, .vdim = 10}): k_proj.weight is
  /// [d_model, kdim], v_proj.weight [d_model, vdim] (torch's kdim/vdim).
  MultiHeadAttention(int64_t d_model, int64_t num_heads, const MhaConfig& config);

  /// Self-attention: x [B, n, d_model] attends to itself (one stacked q/k/v
  /// projection on the fused path). Self or cross is said by which form is
  /// called, never guessed from the arguments.
  AttentionResult forward(const Tensor& x, const MhaOptions& options = {}) const;
  /// Cross-attention with keys and values from one tensor: x [B, n_q, d_model]
  /// attends to memory [B, n_k, kdim] (kdim must equal vdim).
  AttentionResult forward(const Tensor& x, const Tensor& memory, const MhaOptions& options = {}) const;
  /// Attention of query [B, n_q, d_model] over key [B, n_k, kdim] with values
  /// from value [B, n_k, vdim] (torch's forward(query, key, value)). The
  /// result's weights are per head, [B, heads, n_q, n_k], when asked for
  /// (torch's average_attn_weights=False).
  AttentionResult forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const MhaOptions& options = {}) const;

  /// Self-attention of new tokens x [B, t, d_model] at positions pos .. pos+t-1
  /// over every earlier position: their keys and values are written into
  /// `keys`/`values` ([B, capacity, kv_heads, head_dim]) at pos, then each new
  /// query attends causally (and within options.kind's window) to positions
  /// 0 .. its own. Inference only (no dropout); full and window attention.
  Tensor forward_cached(const Tensor& x, const Tensor& keys, const Tensor& values, int64_t pos,
                        const MhaOptions& options) const;

 private:
  // The forms above, said by the caller: self-attention, or a key input named
  // `key_name` in errors ("memory " for the two-input form).
  AttentionResult attend(const Tensor& query, const Tensor& key, const Tensor& value, const MhaOptions& options,
                         bool self_attention, const char* key_name) const;

 public:
  int64_t d_model() const { return d_model_; }
  int64_t num_heads() const { return heads_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t kdim() const { return kdim_; }
  int64_t vdim() const { return vdim_; }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;

 private:
  // The key bias adds q·b_k to every score of a query's row, which softmax
  // ignores: its gradient is exactly zero. Computed, it is rounding noise
  // (about 1e-17 in float64, 1e-8 in float32) that Adam divides by its eps
  // and turns into a random walk of b_k, different for every summation order
  // (thread or process count). Detached, the gradient is the exact zero.
  // Linear attention is not shift-invariant and keeps k_proj's bias live; nor
  // is a rotated key (q·R_n b changes with the key's position n).
  Tensor key_bias() const {
    return !k_proj->bias.defined() ? Tensor() : rotate_ ? k_proj->bias : k_proj->bias.detach();
  }
  // q, k and v as [B, n, heads, head_dim]: projected (k with `k_bias`), rotated
  // (self-attention) and each key/value head repeated for its query heads.
  std::tuple<Tensor, Tensor, Tensor> project(const Tensor& x, const Tensor& key, const Tensor& value,
                                             bool self_attention, const Tensor& k_bias) const;
  // Keys or values [B, n, kv_heads, head_dim] as [B, n, heads, head_dim]: each kv head repeated for its query heads.
  Tensor repeat_heads(const Tensor& t) const;
  int64_t d_model_, heads_, kdim_, vdim_, kv_heads_;
  double dropout_;
  std::function<Tensor(const Tensor&, int64_t)> rotate_;
  Generator* gen_;
};

}  // namespace qkv::nn
