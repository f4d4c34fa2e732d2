#include "nn/models.h"

#include "nn/model_parts.h"

#include "nn/loss.h"

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/matmul.h"
#include "autograd/recompute.h"

namespace qkv::nn {

void check_model_sizes(const char* model, int64_t vocab, int64_t context, int64_t width, int64_t heads) {
  QKV_CHECK(vocab > 0 && context > 0 && width > 0 && heads > 0, model, ": vocab ", vocab, ", context ", context,
            ", width ", width, ", heads ", heads, " must all be positive");
  QKV_CHECK(width % heads == 0, model, ": width ", width, " is not divisible by heads ", heads);
}

Tensor token_and_position(const char* who, const Embedding& tok, const Embedding* pos, int64_t context,
                          const Tensor& ids) {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64, who, ": ids must be int64 [B, T], got ",
            dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  QKV_CHECK(ids.size(1) <= context, who, ": sequence of ", ids.size(1), " tokens exceeds the context of ", context);
  Tensor x = tok.forward(ids);
  return pos ? add(x, pos->range(0, ids.size(1))) : x;
}

std::shared_ptr<Embedding> position_table(const BlockParts& parts, int64_t positions, int64_t width, Generator* gen) {
  return position_part(parts.position).table ? std::make_shared<Embedding>(positions, width, gen, 0.02) : nullptr;
}

std::shared_ptr<ModuleList<TransformerBlock>> block_stack(int64_t layers, const BlockConfig& block, Generator* gen) {
  auto list = std::make_shared<ModuleList<TransformerBlock>>();
  for (int64_t i = 0; i < layers; ++i) list->push_back(std::make_shared<TransformerBlock>(block, gen));
  return list;
}

namespace {

// Logits from the tied head: x · tok_embᵀ.
Tensor tied_head(const Tensor& x, const Embedding& tok) { return matmul(x, tok.weight, false, true); }

}  // namespace

GPT::GPT(const GPTConfig& config, Generator* gen) : config_(config), gen_(gen) {
  check_model_sizes("GPT", config.vocab, config.context, config.width, config.heads);
  QKV_CHECK(config.layers >= 0, "GPT: layers must be >= 0, got ", config.layers);
  tok_emb = register_module("tok_emb", std::make_shared<Embedding>(config.vocab, config.width, gen, 0.02));
  if (auto table = position_table(config.parts, config.context, config.width, gen))
    pos_emb = register_module("pos_emb", table);
  blocks = register_module(
      "blocks", block_stack(config.layers,
                            {config.width, config.heads, config.dropout, config.post_ln, false, config.parts}, gen));
  ln_f = register_module("ln_f", make_norm(config.parts, config.width));
}

Tensor GPT::hidden(const Tensor& ids, std::vector<Tensor>* weights) const {
  Tensor x = token_and_position("GPT", *tok_emb, pos_emb.get(), config_.context, ids);
  MhaOptions causal;
  causal.causal = true;
  causal.kind = config_.attention;
  causal.fused = config_.fused_attention;
  x = run_blocks(*blocks, x, causal, config_.checkpoint_activations, gen_, weights);
  return ln_f->forward(x);
}

Tensor GPT::forward(const Tensor& ids, std::vector<Tensor>* weights) const {
  return tied_head(hidden(ids, weights), *tok_emb);
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets, std::vector<Tensor>* weights, int64_t ignore_index) const {
  return linear_cross_entropy(hidden(ids, weights), tok_emb->weight, targets, ignore_index);
}

KVCache GPT::make_cache(int64_t batch, int64_t positions) const {
  QKV_CHECK(positions >= 0 && positions <= config_.context, "GPT: a cache of ", positions,
            " positions, the context is ", config_.context);
  return KVCache(config_.layers, batch, positions > 0 ? positions : config_.context,
                 config_.parts.kv_heads_for(config_.heads), config_.width / config_.heads, tok_emb->weight.dtype(),
                 tok_emb->weight.device());
}

Tensor GPT::forward_cached(const Tensor& ids, KVCache& cache) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64, "GPT: ids must be int64 [B, t], got ",
            dtype_name(ids.dtype()), " ", shape_str(ids.shape()));
  QKV_CHECK(static_cast<int64_t>(cache.keys.size()) == config_.layers, "GPT: a cache for ", cache.keys.size(),
            " layers, the model has ", config_.layers);
  int64_t pos = cache.length, t = ids.size(1);
  const bool cache_full = cache.capacity() < config_.context;  // a cache made for fewer positions than the context
  QKV_CHECK(pos + t <= std::min(config_.context, cache.capacity()), "GPT: generation reached ",
            cache_full ? "the cache's " : "the context of ", std::min(config_.context, cache.capacity()), " tokens (",
            pos, " cached + ", t, " new)");
  Tensor x = tok_emb->forward(ids);
  if (pos_emb) x = add(x, pos_emb->range(pos, t));
  MhaOptions causal;
  causal.causal = true;
  causal.kind = config_.attention;
  causal.fused = config_.fused_attention;
  for (size_t i = 0; i < blocks->size(); ++i)
    x = (*blocks)[i]->forward_cached(x, cache.keys[i], cache.values[i], pos, causal);
  cache.length = pos + t;
  return tied_head(ln_f->forward(x), *tok_emb);
}

KVCache::KVCache(int64_t layers, int64_t batch, int64_t context, int64_t heads, int64_t head_dim, DType dtype,
                 Device device) {
  for (int64_t i = 0; i < layers; ++i) {
    keys.push_back(Tensor::zeros({batch, context, heads, head_dim}, dtype, device));
    values.push_back(Tensor::zeros({batch, context, heads, head_dim}, dtype, device));
  }
}

Seq2Seq::Seq2Seq(const Seq2SeqConfig& config, Generator* gen) : config_(config), gen_(gen) {
  check_model_sizes("Seq2Seq", config.vocab, config.context, config.width, config.heads);
  QKV_CHECK(config.encoder_layers >= 0 && config.decoder_layers >= 0, "Seq2Seq: layer counts must be >= 0");
  tok_emb = register_module("tok_emb", std::make_shared<Embedding>(config.vocab, config.width, gen, 0.02));
  if (auto table = position_table(config.parts, config.context, config.width, gen))
    pos_emb = register_module("pos_emb", table);
  BlockConfig block{config.width, config.heads, config.dropout, config.post_ln, false, config.parts};
  encoder = register_module("encoder", block_stack(config.encoder_layers, block, gen));
  encoder_ln = register_module("encoder_ln", make_norm(config.parts, config.width));
  block.cross_attention = true;
  decoder = register_module("decoder", block_stack(config.decoder_layers, block, gen));
  ln_f = register_module("ln_f", make_norm(config.parts, config.width));
}

Tensor Seq2Seq::encode(const Tensor& src, const std::vector<int64_t>& src_lengths, std::vector<Tensor>* weights) const {
  Tensor x = token_and_position("Seq2Seq encoder", *tok_emb, pos_emb.get(), config_.context, src);
  QKV_CHECK(static_cast<int64_t>(src_lengths.size()) == src.size(0), "Seq2Seq: ", src_lengths.size(),
            " source lengths for a batch of ", src.size(0));
  MhaOptions padding;
  padding.key_padding_mask = key_padding_mask(src_lengths, src.size(1)).to(src.device());
  padding.kind = config_.attention;
  padding.fused = config_.fused_attention;
  x = run_blocks(*encoder, x, padding, config_.checkpoint_activations, gen_, weights);
  return encoder_ln->forward(x);
}

Tensor Seq2Seq::decode(const Tensor& tgt, const Tensor& memory, const std::vector<int64_t>& src_lengths,
                       std::vector<Tensor>* weights) const {
  Tensor x = token_and_position("Seq2Seq decoder", *tok_emb, pos_emb.get(), config_.context, tgt);
  MhaOptions causal, cross;
  causal.causal = true;
  causal.kind = config_.attention;
  causal.fused = cross.fused = config_.fused_attention;
  cross.key_padding_mask = key_padding_mask(src_lengths, memory.size(1)).to(memory.device());
  for (const auto& block : *decoder)
    x = config_.checkpoint_activations && !weights && grad_enabled()
            ? recompute([block, causal,
                         cross](const std::vector<Tensor>& in) { return block->forward(in[0], causal, in[1], cross); },
                        {x, memory}, gen_)
            : block->forward(x, causal, memory, cross, weights);
  return tied_head(ln_f->forward(x), *tok_emb);
}

Tensor Seq2Seq::forward(const Tensor& src, const std::vector<int64_t>& src_lengths, const Tensor& tgt) const {
  return decode(tgt, encode(src, src_lengths), src_lengths);
}

}  // namespace qkv::nn
