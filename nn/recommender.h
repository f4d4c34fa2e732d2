// A sequential recommender in the style of SASRec (Kang & McAuley, 2018):
// a user's history of items, read with causal self-attention, scores every
// item as the next one through the item embeddings themselves.
#pragma once

#include <memory>

#include "nn/transformer.h"

namespace qkv::nn {

struct RecommenderConfig {
  int64_t items = 100;   // item ids 1..items; id 0 pads short histories
  int64_t context = 20;  // the longest history read
  int64_t width = 64, heads = 4, layers = 2;
  double dropout = 0;
  bool post_ln = false;
  BlockParts parts;  // every block's norm and mlp, and the final norm's (nn/parts.h)
  AttentionKind attention;
  bool checkpoint_activations = false;  // as in GPTConfig
  bool fused_attention = true;          // as in GPTConfig
};

/// Parameters: item_emb.weight [items + 1, width] (row 0 the padding),
/// pos_emb.weight [context, width], blocks.{i}.*, ln_f. Scores are tied to
/// the item embeddings: h_t · item_embᵀ. Histories are right-padded, so
/// with the causal mask no real position ever sees a padding position;
/// padding positions' own scores are simply not trained (targets -100).
class Recommender : public Module {
 public:
  explicit Recommender(const RecommenderConfig& config, Generator* gen = nullptr);
  /// histories int64 [B, T] -> scores [B, T, items + 1] for the item after
  /// each position (column 0, the padding, is never a target). `weights`,
  /// when given, receives each layer's attention weights [B, heads, T, T].
  Tensor forward(const Tensor& histories, std::vector<Tensor>* weights = nullptr) const;
  void set_checkpoint_activations(bool on) { config_.checkpoint_activations = on; }
  void set_fused_attention(bool on) { config_.fused_attention = on; }
  const RecommenderConfig& config() const { return config_; }

  std::shared_ptr<Embedding> item_emb, pos_emb;  // pos_emb null where the position part keeps no table (rope)
  std::shared_ptr<ModuleList<TransformerBlock>> blocks;
  std::shared_ptr<Norm> ln_f;  // the parts' norm

 private:
  RecommenderConfig config_;
  Generator* gen_;
};

}  // namespace qkv::nn
