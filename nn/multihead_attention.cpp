#include "nn/multihead_attention.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "autograd/ops/attention.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/shape.h"

namespace qkv::nn {

AttentionKind AttentionKind::parse(const std::string& text) {
  if (text == "full") return {};
  if (text == "linear") return {Linear, 0};
  if (text.rfind("window:", 0) == 0) {
    std::string w = text.substr(7);
    bool digits = !w.empty() && w.size() <= 9 && w.find_first_not_of("0123456789") == std::string::npos;
    if (digits && std::stoll(w) >= 1) return {Window, std::stoll(w)};
  }
  throw Error(cat("the attention kind must be full, window:W (W >= 1) or linear, got '", printable(text), "'"));
}

std::string AttentionKind::str() const {
  switch (type) {
    case Window: return cat("window:", window);
    case Linear: return "linear";
    default: return "full";
  }
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t num_heads, double dropout, bool bias, Generator* gen)
    : MultiHeadAttention(d_model, num_heads, MhaConfig{dropout, bias, 0, 0, gen, 0, nullptr}) {}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t num_heads, const MhaConfig& config)
    : d_model_(d_model),
      heads_(num_heads),
      kdim_(config.kdim == 0 ? d_model : config.kdim),
      vdim_(config.vdim == 0 ? d_model : config.vdim),
      kv_heads_(config.kv_heads == 0 ? num_heads : config.kv_heads),
      dropout_(config.dropout),
      rotate_(config.rotate),
      gen_(config.gen) {
  QKV_CHECK(d_model > 0 && num_heads > 0, "MultiHeadAttention: d_model ", d_model, " and num_heads ", num_heads,
            " must be positive");
  QKV_CHECK(d_model % num_heads == 0, "MultiHeadAttention: d_model ", d_model, " is not divisible by num_heads ",
            num_heads);
  QKV_CHECK(config.kdim >= 0 && config.vdim >= 0, "MultiHeadAttention: kdim ", config.kdim, " and vdim ", config.vdim,
            " must be positive (or 0 for d_model)");
  QKV_CHECK(dropout_ >= 0 && dropout_ <= 1, "MultiHeadAttention: dropout must be in [0, 1], got ", dropout_);
  QKV_CHECK(kv_heads_ >= 1 && num_heads % kv_heads_ == 0, "MultiHeadAttention: kv_heads ", config.kv_heads,
            " does not divide num_heads ", num_heads);
  const int64_t kv_width = d_model / num_heads * kv_heads_;
  for (auto [name, proj, in, out] :
       {std::tuple{"q_proj", &q_proj, d_model, d_model}, std::tuple{"k_proj", &k_proj, kdim_, kv_width},
        std::tuple{"v_proj", &v_proj, vdim_, kv_width}, std::tuple{"out_proj", &out_proj, d_model, d_model}})
    *proj = register_module(name, std::make_shared<Linear>(in, out, config.bias, Init::XavierUniform, config.gen));
}

std::tuple<Tensor, Tensor, Tensor> MultiHeadAttention::project(const Tensor& x, const Tensor& key, const Tensor& value,
                                                               bool self_attention, const Tensor& k_bias) const {
  const int64_t B = x.size(0), nq = x.size(1), nk = key.size(1), hd = d_model_ / heads_;
  // [B, n, d_model] is already [B, n, heads, head_dim] in memory: a reshape, no copy.
  Tensor q = reshape(q_proj->forward(x), {B, nq, heads_, hd}), k;
  {
    auto projection = k_proj->scope();  // k_proj's own forward, with the bias the caller gives
    k = qkv::linear(key, k_proj->weight, k_bias);
  }
  k = reshape(k, {B, nk, kv_heads_, hd});
  Tensor v = reshape(v_proj->forward(value), {B, nk, kv_heads_, hd});
  if (rotate_ && self_attention) q = rotate_(q, 0), k = rotate_(k, 0);
  return {q, repeat_heads(k), repeat_heads(v)};
}

Tensor MultiHeadAttention::repeat_heads(const Tensor& t) const {
  if (kv_heads_ == heads_) return t;
  const int64_t B = t.size(0), n = t.size(1), hd = t.size(3), group = heads_ / kv_heads_;
  return reshape(expand(unsqueeze(t, 3), {B, n, kv_heads_, group, hd}), {B, n, heads_, hd});
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const MhaOptions& options) const {
  return attend(x, x, x, options, true, "self-attention's key ");
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const Tensor& memory, const MhaOptions& options) const {
  return attend(x, memory, memory, options, false, "memory ");
}

AttentionResult MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const MhaOptions& options) const {
  return attend(query, key, value, options, false, "key ");
}

AttentionResult MultiHeadAttention::attend(const Tensor& x, const Tensor& key, const Tensor& value,
                                           const MhaOptions& options, bool self_attention, const char* key_name) const {
  auto scope = this->scope();  // names this module in graph pictures
  auto where = [&] { return cat("MultiHeadAttention(d_model=", d_model_, ", heads=", heads_, "): "); };
  QKV_CHECK(x.dim() == 3 && x.size(-1) == d_model_, where(), "query ", shape_str(x.shape()), " must be [B, n, ",
            d_model_, "]");
  QKV_CHECK(key.dim() == 3 && key.size(-1) == kdim_ && key.size(0) == x.size(0), where(), key_name,
            shape_str(key.shape()), " must be [", x.size(0), ", n_k, ", kdim_, "]");
  QKV_CHECK(value.dim() == 3 && value.size(-1) == vdim_ && value.size(0) == x.size(0) && value.size(1) == key.size(1),
            where(), "value ", shape_str(value.shape()), " must be [", x.size(0), ", ", key.size(1), ", ", vdim_, "]");
  int64_t B = x.size(0), nq = x.size(1), nk = key.size(1), hd = d_model_ / heads_;

  const Tensor& attn_mask = options.attn_mask;
  if (attn_mask.defined())
    QKV_CHECK(attn_mask.dim() >= 2 && attn_mask.dim() <= 4 && attn_mask.size(-1) == nk && attn_mask.size(-2) == nq,
              where(), "attn_mask ", shape_str(attn_mask.shape()), " does not fit ", nq, " queries and ", nk, " keys");
  if (options.key_padding_mask.defined())
    QKV_CHECK((options.key_padding_mask.shape() == Shape{B, nk}), where(), "key_padding_mask ",
              shape_str(options.key_padding_mask.shape()), " must be [", B, ", ", nk, "]");
  const AttentionKind& kind = options.kind;
  if (kind.type == AttentionKind::Linear) {  // no weight matrix: no weights to return, none to drop out
    QKV_CHECK(self_attention, where(), "linear attention is self-attention only (no cross-attention)");
    QKV_CHECK(!options.need_weights, where(),
              "linear attention computes no attention weights (no n x n matrix exists)");
    QKV_CHECK(!attn_mask.defined(), where(), "linear attention takes no attn_mask (only causal and key padding)");
    auto [q, k, v] = project(x, x, x, true, k_proj->bias);
    Tensor o = linear_attention(q, k, v, options.causal, options.key_padding_mask);
    return {out_proj->forward(reshape(o, {B, nq, d_model_})), Tensor()};
  }
  const int64_t window = kind.type == AttentionKind::Window ? kind.window : 0;
  double p = is_training() ? dropout_ : 0.0;
  Tensor mask3 = attn_mask.defined() && attn_mask.dim() == 3 ? unsqueeze(attn_mask, 1) : attn_mask;  // [B, 1, n_q, n_k]
  // Which keys each query sees, in one description that every path reads.
  const AttentionMasks masks{mask3, options.key_padding_mask, options.causal, window};
  // The fused kernel takes a bool padding mask; a float one (added to the scores) goes the composed way.
  const Tensor& padding = options.key_padding_mask;
  bool fused = options.fused && p == 0 && !options.need_weights && !attention_weights_wanted() &&
               !(attn_mask.defined() && attn_mask.requires_grad()) &&
               !(padding.defined() && padding.dtype() != DType::Bool);
  if (fused && self_attention && kv_heads_ == heads_ && !rotate_) {
    // Self-attention: one [3·d_model, d_model] projection (q, k, v weights stacked), its output read in place.
    try {
      Tensor w = concat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
      Tensor b = q_proj->bias.defined() ? concat({q_proj->bias, key_bias(), v_proj->bias}, 0) : Tensor();
      Tensor qkv = reshape(qkv::linear(x, w, b), {B, nq, 3, heads_, hd});
      Tensor o = fused_self_attention(qkv, masks, 1.0 / std::sqrt(static_cast<double>(hd)));
      return {out_proj->forward(reshape(o, {B, nq, d_model_})), Tensor()};
    } catch (const Error& e) {
      throw Error(where() + e.what());
    }
  }
  auto [q, k, v] = project(x, key, value, self_attention, key_bias());
  try {
    if (fused) {
      Tensor o = fused_attention(q, k, v, masks, 1.0 / std::sqrt(static_cast<double>(hd)));
      return {out_proj->forward(reshape(o, {B, nq, d_model_})), Tensor()};
    }
    // The composed path: weights to return, dropout on them. Every mask becomes
    // broadcastable to the scores [B, heads, n_q, n_k].
    Tensor mask = mask3;
    if (options.key_padding_mask.defined()) mask = merge_masks(mask, reshape(options.key_padding_mask, {B, 1, 1, nk}));
    Tensor position = masks.position_mask(nq, nk);  // causal and window, as the kernels read them
    if (position.defined()) mask = merge_masks(mask, position.to(q.device()));
    auto heads = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };  // -> [B, heads, n, head_dim]
    AttentionResult r = scaled_dot_product_attention(heads(q), heads(k), heads(v), mask, p, gen_);
    Tensor merged = reshape(permute(r.output, {0, 2, 1, 3}), {B, nq, d_model_});
    return {out_proj->forward(merged), options.need_weights ? r.weights : Tensor()};
  } catch (const Error& e) {
    throw Error(where() + e.what());
  }
}

Tensor MultiHeadAttention::forward_cached(const Tensor& x, const Tensor& keys, const Tensor& values, int64_t pos,
                                          const MhaOptions& options) const {
  auto where = [&] { return cat("MultiHeadAttention(d_model=", d_model_, ", heads=", heads_, ") with a cache: "); };
  int64_t hd = d_model_ / heads_;
  QKV_CHECK(x.dim() == 3 && x.size(-1) == d_model_, where(), "input ", shape_str(x.shape()), " must be [B, t, ",
            d_model_, "]");
  int64_t B = x.size(0), t = x.size(1);
  QKV_CHECK(keys.dim() == 4 && keys.size(0) == B && keys.size(2) == kv_heads_ && keys.size(3) == hd &&
                values.shape() == keys.shape() && keys.dtype() == x.dtype() && values.dtype() == x.dtype(),
            where(), "cache ", shape_str(keys.shape()), " does not fit input ", shape_str(x.shape()));
  QKV_CHECK(pos >= 0 && pos + t <= keys.size(1), where(), "positions ", pos, "..", pos + t, " exceed its ",
            keys.size(1));
  QKV_CHECK(options.kind.type != AttentionKind::Linear, where(), "linear attention keeps no keys and values to cache");
  common_device("MultiHeadAttention cache", {x, keys, values});  // the cache lives with the model
  QKV_CHECK(kdim_ == d_model_ && vdim_ == d_model_, where(), "self-attention needs kdim and vdim equal to d_model");
  Tensor q = reshape(q_proj->forward(x), {B, t, heads_, hd});
  Tensor k = k_proj->forward(x), v = v_proj->forward(x);  // [B, t, kv_heads · head_dim]: rows of the cache at pos
  if (rotate_) {                                          // keys are cached rotated, each at its own position
    q = rotate_(q, pos);
    k = reshape(rotate_(reshape(k, {B, t, kv_heads_, hd}), pos), {B, t, kv_heads_ * hd});
  }
  int64_t C = kv_heads_ * hd, cap = keys.size(1);
  if (!x.device().is_cpu()) {
    qkv::device::copy_rows(k, t, 0, keys, cap, pos, B, t, C);
    qkv::device::copy_rows(v, t, 0, values, cap, pos, B, t, C);
  } else {
    dispatch_floating(x.dtype(), "forward_cached", [&](auto zero) {
      using T = decltype(zero);
      for (int64_t b = 0; b < B; ++b) {
        std::copy(k.data<T>() + b * t * C, k.data<T>() + (b + 1) * t * C, keys.data<T>() + (b * cap + pos) * C);
        std::copy(v.data<T>() + b * t * C, v.data<T>() + (b + 1) * t * C, values.data<T>() + (b * cap + pos) * C);
      }
    });
  }
  int64_t n = pos + t;
  // New query i sits at position pos + i among the keys: causal (and windowed) from there.
  AttentionMasks masks;
  masks.causal = true, masks.query_offset = pos;
  masks.window = options.kind.type == AttentionKind::Window ? options.kind.window : 0;
  Tensor o = fused_attention(q, repeat_heads(narrow(keys, 1, 0, n)), repeat_heads(narrow(values, 1, 0, n)), masks,
                             1.0 / std::sqrt(static_cast<double>(hd)));
  return out_proj->forward(reshape(o, {B, t, d_model_}));
}

}  // namespace qkv::nn
