#include "nn/transformer.h"

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"
#include "autograd/recompute.h"

namespace qkv::nn {

TransformerBlock::TransformerBlock(const BlockConfig& config, Generator* gen) : config_(config), gen_(gen) {
  // Registered and drawn in this order whatever the parts: the default parts keep today's names and bits.
  ln1 = register_module("ln1", make_norm(config.parts, config.width));
  attn = register_module(
      "attn", std::make_shared<MultiHeadAttention>(config.width, config.heads,
                                                   MhaConfig{config.dropout, true, 0, 0, gen, config.parts.kv_heads,
                                                             position_part(config.parts.position).rotate}));
  if (config.cross_attention) {
    ln_cross = register_module("ln_cross", make_norm(config.parts, config.width));
    cross_attn = register_module(
        "cross_attn", std::make_shared<MultiHeadAttention>(config.width, config.heads, config.dropout, true, gen));
  }
  ln2 = register_module("ln2", make_norm(config.parts, config.width));
  mlp = register_module("mlp", mlp_part(config.parts.mlp).build(config.width, gen));
}

Tensor TransformerBlock::forward(const Tensor& x, const MhaOptions& self_options, const Tensor& memory,
                                 const MhaOptions& cross_options, std::vector<Tensor>* weights) const {
  auto scope = this->scope();  // names this module in graph pictures
  QKV_CHECK(!config_.cross_attention || memory.defined(), "TransformerBlock: a cross-attention block needs memory");
  double p = is_training() ? config_.dropout : 0.0;
  auto branch = [&](const Tensor& t) { return dropout(t, p, true, gen_); };
  auto attend = [&](const MultiHeadAttention& mha, const Tensor& q, const Tensor* mem, MhaOptions options) {
    options.need_weights = weights != nullptr;
    AttentionResult r = mem ? mha.forward(q, *mem, options) : mha.forward(q, options);
    if (weights) weights->push_back(r.weights);
    return r.output;
  };
  Tensor h = x;
  if (config_.post_ln) {
    h = ln1->forward(add(h, branch(attend(*attn, h, nullptr, self_options))));
    if (cross_attn) h = ln_cross->forward(add(h, branch(attend(*cross_attn, h, &memory, cross_options))));
    return ln2->forward(add(h, branch(mlp->forward(h))));
  }
  h = add(h, branch(attend(*attn, ln1->forward(h), nullptr, self_options)));
  if (cross_attn) h = add(h, branch(attend(*cross_attn, ln_cross->forward(h), &memory, cross_options)));
  return add(h, branch(mlp->forward(ln2->forward(h))));
}

Tensor TransformerBlock::forward_cached(const Tensor& x, const Tensor& keys, const Tensor& values, int64_t pos,
                                        const MhaOptions& self_options) const {
  QKV_CHECK(!config_.cross_attention, "TransformerBlock: a key/value cache serves self-attention blocks only");
  if (config_.post_ln) {
    Tensor h = ln1->forward(add(x, attn->forward_cached(x, keys, values, pos, self_options)));
    return ln2->forward(add(h, mlp->forward(h)));
  }
  Tensor h = add(x, attn->forward_cached(ln1->forward(x), keys, values, pos, self_options));
  return add(h, mlp->forward(ln2->forward(h)));
}

Tensor run_blocks(const ModuleList<TransformerBlock>& blocks, Tensor x, const MhaOptions& options, bool checkpoint,
                  Generator* gen, std::vector<Tensor>* weights) {
  for (const auto& block : blocks)
    x = checkpoint && !weights && grad_enabled()
            ? recompute([block, options](const std::vector<Tensor>& in) { return block->forward(in[0], options); }, {x},
                        gen)
            : block->forward(x, options, Tensor(), {}, weights);
  return x;
}

}  // namespace qkv::nn
