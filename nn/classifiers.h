// Classifiers built on a bidirectional transformer encoder: a BERT-style
// text classifier (EncoderClassifier) and a Vision Transformer (ViT). Both
// run pre- or post-LN TransformerBlocks without a causal mask, a final
// LayerNorm, and a Linear head on the pooled sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/transformer.h"

namespace qkv::nn {

/// How a classifier turns its sequence into one vector.
enum class Pooling {
  Cls,   // a learned [CLS] token in front of the input; its final state is pooled (BERT, ViT)
  Mean,  // the mean of the final states of the unpadded tokens
};
/// "cls" | "mean" (errors name the value).
Pooling parse_pooling(const std::string& name);
const char* pooling_name(Pooling pooling);

struct EncoderConfig {
  int64_t vocab = 16, context = 33, width = 64, heads = 4, layers = 2, classes = 2;
  Pooling pooling = Pooling::Cls;  // with Cls the context counts the [CLS] token too
  double dropout = 0;
  bool post_ln = false;
  BlockParts parts;  // every block's norm and mlp, and the final norm's (nn/parts.h)
  AttentionKind attention;
  bool checkpoint_activations = false;  // as in GPTConfig
  bool fused_attention = true;          // as in GPTConfig
};

/// BERT-style sequence classifier. Parameters: tok_emb, pos_emb, cls_token
/// [width] (Cls pooling only), blocks.{i}.*, ln_f, head.{weight,bias}
/// [classes, width]. Key padding is masked in every layer.
class EncoderClassifier : public Module {
 public:
  explicit EncoderClassifier(const EncoderConfig& config, Generator* gen = nullptr);
  /// ids int64 [B, T], right-padded, with each row's true length in [1, T]
  /// -> logits [B, classes]. `weights`, when given, receives each layer's
  /// attention weights [B, heads, n, n] (n = T + 1 with the [CLS] token first).
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& lengths, std::vector<Tensor>* weights = nullptr) const;
  void set_checkpoint_activations(bool on) { config_.checkpoint_activations = on; }
  void set_fused_attention(bool on) { config_.fused_attention = on; }
  const EncoderConfig& config() const { return config_; }

  std::shared_ptr<Embedding> tok_emb, pos_emb;  // pos_emb null where the position part keeps no table (rope)
  Tensor cls_token;                             // undefined with mean pooling
  std::shared_ptr<ModuleList<TransformerBlock>> blocks;
  std::shared_ptr<Norm> ln_f;  // the parts' norm
  std::shared_ptr<Linear> head;

 private:
  EncoderConfig config_;
  Generator* gen_;
};

struct ViTConfig {
  int64_t image = 8, patch = 2, channels = 1, width = 64, heads = 4, layers = 2, classes = 10;
  double dropout = 0;
  bool post_ln = false;
  BlockParts parts;  // every block's norm and mlp, and the final norm's (nn/parts.h)
  AttentionKind attention;
  bool checkpoint_activations = false;  // as in GPTConfig
  bool fused_attention = true;          // as in GPTConfig
  /// (image / patch)² patches and the [CLS] token.
  int64_t tokens() const { return (image / patch) * (image / patch) + 1; }
};

/// Vision Transformer (Dosovitskiy et al.) for square images. Parameters:
/// patch_embed.proj.{weight [width, C·p·p], bias}, cls_token [width],
/// pos_emb.weight [tokens, width], blocks.{i}.*, ln_f, head.
class ViT : public Module {
 public:
  explicit ViT(const ViTConfig& config, Generator* gen = nullptr);
  /// images [B, C, image, image] -> logits [B, classes]. `weights`, when
  /// given, receives each layer's attention weights [B, heads, n, n] over
  /// the [CLS] token (first) and the patches in row-major order.
  Tensor forward(const Tensor& images, std::vector<Tensor>* weights = nullptr) const;
  void set_checkpoint_activations(bool on) { config_.checkpoint_activations = on; }
  void set_fused_attention(bool on) { config_.fused_attention = on; }
  const ViTConfig& config() const { return config_; }

  std::shared_ptr<PatchEmbedding> patch_embed;
  Tensor cls_token;
  std::shared_ptr<Embedding> pos_emb;  // null where the position part keeps no table (rope)
  std::shared_ptr<ModuleList<TransformerBlock>> blocks;
  std::shared_ptr<Norm> ln_f;  // the parts' norm
  std::shared_ptr<Linear> head;

 private:
  ViTConfig config_;
  Generator* gen_;
};

}  // namespace qkv::nn
