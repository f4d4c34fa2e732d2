#include "nn/multihead_attention.h"

#include <cmath>

#include "autograd/ops/attention.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/shape.h"

namespace qkv::nn {

namespace {
bool fused_enabled = true;
}  // namespace

void use_fused_attention(bool on) { fused_enabled = on; }
bool fused_attention_enabled() { return fused_enabled; }

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t num_heads, double dropout, bool bias, Generator* gen)
    : d_model_(d_model), heads_(num_heads), dropout_(dropout), gen_(gen) {
  QKV_CHECK(d_model > 0 && num_heads > 0, "MultiHeadAttention: d_model ", d_model, " and num_heads ", num_heads,
        " must be positive");
  QKV_CHECK(d_model % num_heads == 0, "MultiHeadAttention: d_model ", d_model, " is not divisible by num_heads ", num_heads);
  QKV_CHECK(dropout >= 0 && dropout <= 1, "MultiHeadAttention: dropout must be in [0, 1], got ", dropout);
  for (auto [name, proj] : {std::pair{"q_proj", &q_proj}, std::pair{"k_proj", &k_proj}, std::pair{"v_proj", &v_proj},
                            std::pair{"out_proj", &out_proj}})
    *proj = register_module(name, std::make_shared<Linear>(d_model, d_model, bias, Init::XavierUniform, gen));
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const MhaOptions& options) const {
  return forward(x, x, options);
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const Tensor& memory, const MhaOptions& options) const {
  auto where = [&] { return cat("MultiHeadAttention(d_model=", d_model_, ", heads=", heads_, "): "); };
  QKV_CHECK(x.dim() == 3 && x.size(-1) == d_model_, where(), "query ", shape_str(x.shape()), " must be [B, n, ", d_model_, "]");
  QKV_CHECK(memory.dim() == 3 && memory.size(-1) == d_model_ && memory.size(0) == x.size(0), where(), "memory ",
        shape_str(memory.shape()), " must be [", x.size(0), ", n_k, ", d_model_, "]");
  int64_t B = x.size(0), nq = x.size(1), nk = memory.size(1), hd = d_model_ / heads_;

  const Tensor& attn_mask = options.attn_mask;
  if (attn_mask.defined())
    QKV_CHECK(attn_mask.dim() >= 2 && attn_mask.dim() <= 4 && attn_mask.size(-1) == nk && attn_mask.size(-2) == nq,
              where(), "attn_mask ", shape_str(attn_mask.shape()), " does not fit ", nq, " queries and ", nk, " keys");
  if (options.key_padding_mask.defined())
    QKV_CHECK((options.key_padding_mask.shape() == Shape{B, nk}), where(), "key_padding_mask ",
              shape_str(options.key_padding_mask.shape()), " must be [", B, ", ", nk, "]");
  double p = is_training() ? dropout_ : 0.0;
  Tensor mask3 = attn_mask.defined() && attn_mask.dim() == 3 ? unsqueeze(attn_mask, 1) : attn_mask;  // [B, 1, n_q, n_k]
  bool fused = fused_enabled && p == 0 && !options.need_weights && !(attn_mask.defined() && attn_mask.requires_grad());
  if (fused && x.impl() == memory.impl()) {
    // Self-attention: one [3·d_model, d_model] projection (q, k, v weights stacked), its output read in place.
    try {
      Tensor w = concat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
      Tensor b = q_proj->bias.defined() ? concat({q_proj->bias, k_proj->bias, v_proj->bias}, 0) : Tensor();
      Tensor qkv = reshape(qkv::linear(x, w, b), {B, nq, 3, heads_, hd});
      Tensor o = fused_self_attention(qkv, {mask3, options.key_padding_mask, options.causal},
                                      1.0 / std::sqrt(static_cast<double>(hd)));
      return {out_proj->forward(reshape(o, {B, nq, d_model_})), Tensor()};
    } catch (const Error& e) {
      throw Error(where() + e.what());
    }
  }
  // [B, n, d_model] is already [B, n, heads, head_dim] in memory: a reshape, no copy.
  Tensor q = reshape(q_proj->forward(x), {B, nq, heads_, hd}), k = reshape(k_proj->forward(memory), {B, nk, heads_, hd}),
         v = reshape(v_proj->forward(memory), {B, nk, heads_, hd});
  try {
    if (fused) {
      AttentionMasks masks{mask3, options.key_padding_mask, options.causal};
      Tensor o = fused_attention(q, k, v, masks, 1.0 / std::sqrt(static_cast<double>(hd)));
      return {out_proj->forward(reshape(o, {B, nq, d_model_})), Tensor()};
    }
    // The composed path: weights to return, dropout on them. Every mask becomes
    // broadcastable to the scores [B, heads, n_q, n_k].
    Tensor mask = mask3;
    if (options.key_padding_mask.defined()) mask = merge_masks(mask, reshape(options.key_padding_mask, {B, 1, 1, nk}));
    if (options.causal) mask = merge_masks(mask, causal_mask(nq, nk));
    auto heads = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };  // -> [B, heads, n, head_dim]
    AttentionResult r = scaled_dot_product_attention(heads(q), heads(k), heads(v), mask, p, gen_);
    Tensor merged = reshape(permute(r.output, {0, 2, 1, 3}), {B, nq, d_model_});
    return {out_proj->forward(merged), options.need_weights ? r.weights : Tensor()};
  } catch (const Error& e) {
    throw Error(where() + e.what());
  }
}

}  // namespace qkv::nn
