#include "nn/multihead_attention.h"

#include "autograd/ops/shape.h"

namespace qkv::nn {

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

  // Every mask becomes broadcastable to the scores [B, heads, n_q, n_k].
  Tensor mask;
  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    QKV_CHECK(m.dim() >= 2 && m.dim() <= 4 && m.size(-1) == nk && m.size(-2) == nq, where(), "attn_mask ",
          shape_str(m.shape()), " does not fit ", nq, " queries and ", nk, " keys");
    mask = m.dim() == 3 ? unsqueeze(m, 1) : m;
  }
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    QKV_CHECK((m.shape() == Shape{B, nk}), where(), "key_padding_mask ", shape_str(m.shape()), " must be [", B, ", ", nk, "]");
    mask = merge_masks(mask, reshape(m, {B, 1, 1, nk}));
  }
  if (options.causal) mask = merge_masks(mask, causal_mask(nq, nk));

  // [B, n, d_model] -> [B, heads, n, head_dim]
  auto heads = [&](const Tensor& t, int64_t n) { return permute(reshape(t, {B, n, heads_, hd}), {0, 2, 1, 3}); };
  Tensor q = heads(q_proj->forward(x), nq), k = heads(k_proj->forward(memory), nk), v = heads(v_proj->forward(memory), nk);
  AttentionResult r;
  try {
    r = scaled_dot_product_attention(q, k, v, mask, is_training() ? dropout_ : 0.0, gen_);
  } catch (const Error& e) {
    throw Error(where() + e.what());
  }
  Tensor merged = reshape(permute(r.output, {0, 2, 1, 3}), {B, nq, d_model_});
  return {out_proj->forward(merged), options.need_weights ? r.weights : Tensor()};
}

}  // namespace qkv::nn
