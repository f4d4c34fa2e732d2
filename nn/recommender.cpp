#include "nn/recommender.h"

#include "autograd/ops/matmul.h"
#include "nn/model_parts.h"

namespace qkv::nn {

Recommender::Recommender(const RecommenderConfig& config, Generator* gen) : config_(config), gen_(gen) {
  check_model_sizes("Recommender", config.items, config.context, config.width, config.heads);
  QKV_CHECK(config.layers >= 0, "Recommender: layers must be >= 0, got ", config.layers);
  item_emb = register_module("item_emb", std::make_shared<Embedding>(config.items + 1, config.width, gen, 0.02));
  if (auto table = position_table(config.parts, config.context, config.width, gen))
    pos_emb = register_module("pos_emb", table);
  blocks = register_module(
      "blocks", block_stack(config.layers,
                            {config.width, config.heads, config.dropout, config.post_ln, false, config.parts}, gen));
  ln_f = register_module("ln_f", make_norm(config.parts, config.width));
}

Tensor Recommender::forward(const Tensor& histories, std::vector<Tensor>* weights) const {
  Tensor x = token_and_position("Recommender", *item_emb, pos_emb.get(), config_.context, histories);
  MhaOptions causal;
  causal.causal = true;
  causal.kind = config_.attention;
  causal.fused = config_.fused_attention;
  x = ln_f->forward(run_blocks(*blocks, x, causal, config_.checkpoint_activations, gen_, weights));
  return matmul(x, item_emb->weight, false, true);  // tied: an item's score is its embedding's dot product
}

}  // namespace qkv::nn
