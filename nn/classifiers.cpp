#include "nn/classifiers.h"

#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "nn/model_parts.h"

namespace qkv::nn {

Pooling parse_pooling(const std::string& name) {
  if (name == "cls") return Pooling::Cls;
  if (name == "mean") return Pooling::Mean;
  throw Error(cat("unknown pooling '", printable(name), "' (cls, mean)"));
}

const char* pooling_name(Pooling pooling) { return pooling == Pooling::Cls ? "cls" : "mean"; }

namespace {

// [cls; x]: the learned token [C] in front of every row of x [B, n, C].
Tensor prepend(const Tensor& cls, const Tensor& x) {
  return concat({expand(reshape(cls, {1, 1, x.size(2)}), {x.size(0), 1, x.size(2)}), x}, 1);
}

// The [CLS] token's final state: row 0 of every sequence, [B, C].
Tensor first_token(const Tensor& x) { return reshape(narrow(x, 1, 0, 1), {x.size(0), x.size(2)}); }

}  // namespace

EncoderClassifier::EncoderClassifier(const EncoderConfig& config, Generator* gen) : config_(config), gen_(gen) {
  check_model_sizes("EncoderClassifier", config.vocab, config.context, config.width, config.heads);
  QKV_CHECK(config.layers >= 0 && config.classes >= 2, "EncoderClassifier: layers ", config.layers, " and classes ",
            config.classes, " must be >= 0 and >= 2");
  QKV_CHECK(config.pooling != Pooling::Cls || config.context >= 2, "EncoderClassifier: a context of ", config.context,
            " leaves no room beside the [CLS] token");
  tok_emb = register_module("tok_emb", std::make_shared<Embedding>(config.vocab, config.width, gen, 0.02));
  if (auto table = position_table(config.parts, config.context, config.width, gen))
    pos_emb = register_module("pos_emb", table);
  if (config.pooling == Pooling::Cls)
    cls_token = register_parameter("cls_token", (Tensor::randn({config.width}, DType::Float32, gen) * 0.02).detach());
  blocks = register_module(
      "blocks", block_stack(config.layers,
                            {config.width, config.heads, config.dropout, config.post_ln, false, config.parts}, gen));
  ln_f = register_module("ln_f", make_norm(config.parts, config.width));
  head = register_module("head", std::make_shared<Linear>(config.width, config.classes, true, Init::Normal002, gen));
}

Tensor EncoderClassifier::forward(const Tensor& ids, const std::vector<int64_t>& lengths,
                                  std::vector<Tensor>* weights) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64, "EncoderClassifier: ids must be int64 [B, T], got ",
            dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  const bool cls = config_.pooling == Pooling::Cls;
  const int64_t B = ids.size(0), T = ids.size(1), n = T + (cls ? 1 : 0);
  QKV_CHECK(n <= config_.context, "EncoderClassifier: ", T, " tokens", cls ? " and the [CLS] token" : "",
            " exceed the context of ", config_.context);
  QKV_CHECK(static_cast<int64_t>(lengths.size()) == B, "EncoderClassifier: ", lengths.size(),
            " lengths for a batch of ", B);
  std::vector<int64_t> seen(lengths);  // the [CLS] token is one more key every row sees
  for (int64_t& l : seen) {
    QKV_CHECK(l >= 1 && l <= T, "EncoderClassifier: length ", l, " is not in [1, ", T, "]");
    l += cls ? 1 : 0;
  }
  Tensor x = tok_emb->forward(ids);
  if (cls) x = prepend(cls_token, x);
  if (pos_emb) x = add(x, pos_emb->range(0, n));
  MhaOptions padding;
  padding.key_padding_mask = key_padding_mask(seen, n).to(ids.device());
  padding.kind = config_.attention;
  padding.fused = config_.fused_attention;
  x = ln_f->forward(run_blocks(*blocks, x, padding, config_.checkpoint_activations, gen_, weights));
  Tensor pooled = cls ? first_token(x) : masked_mean(x, Tensor::from_vector(lengths, {B}).to(ids.device()));
  return head->forward(pooled);
}

ViT::ViT(const ViTConfig& config, Generator* gen) : config_(config), gen_(gen) {
  check_model_sizes("ViT", 1, config.tokens(), config.width, config.heads);
  QKV_CHECK(config.image > 0 && config.patch > 0 && config.image % config.patch == 0, "ViT: patch ", config.patch,
            " does not tile images of ", config.image, " x ", config.image);
  QKV_CHECK(config.layers >= 0 && config.classes >= 2, "ViT: layers ", config.layers, " and classes ", config.classes,
            " must be >= 0 and >= 2");
  patch_embed = register_module("patch_embed",
                                std::make_shared<PatchEmbedding>(config.channels, config.patch, config.width, gen));
  cls_token = register_parameter("cls_token", (Tensor::randn({config.width}, DType::Float32, gen) * 0.02).detach());
  if (auto table = position_table(config.parts, config.tokens(), config.width, gen))
    pos_emb = register_module("pos_emb", table);
  blocks = register_module(
      "blocks", block_stack(config.layers,
                            {config.width, config.heads, config.dropout, config.post_ln, false, config.parts}, gen));
  ln_f = register_module("ln_f", make_norm(config.parts, config.width));
  head = register_module("head", std::make_shared<Linear>(config.width, config.classes, true, Init::Normal002, gen));
}

Tensor ViT::forward(const Tensor& images, std::vector<Tensor>* weights) const {
  QKV_CHECK(images.dim() == 4 && images.size(1) == config_.channels && images.size(2) == config_.image &&
                images.size(3) == config_.image,
            "ViT: images must be [B, ", config_.channels, ", ", config_.image, ", ", config_.image, "], got ",
            shape_str(images.shape()));
  Tensor x = prepend(cls_token, patch_embed->forward(images));
  if (pos_emb) x = add(x, pos_emb->range(0, config_.tokens()));
  MhaOptions all;  // every patch sees every patch
  all.kind = config_.attention;
  all.fused = config_.fused_attention;
  x = ln_f->forward(run_blocks(*blocks, x, all, config_.checkpoint_activations, gen_, weights));
  return head->forward(first_token(x));
}

}  // namespace qkv::nn
