// Transformer blocks (pre- or post-norm), optionally with cross-attention for
// decoders, built from named parts (nn/parts.h).
#pragma once

#include <memory>
#include <vector>

#include "nn/dropout.h"
#include "nn/feed_forward.h"
#include "nn/layers.h"
#include "nn/multihead_attention.h"
#include "nn/normalization.h"
#include "nn/parts.h"

namespace qkv::nn {

struct BlockConfig {
  int64_t width = 128, heads = 4;
  double dropout = 0;            // on the attention weights and each residual branch
  bool post_ln = false;          // LayerNorm after each residual (the original paper) instead of before
  bool cross_attention = false;  // a decoder block: attends to an encoder's output too
  BlockParts parts;              // its norms and feed-forward network, by name (nn/parts.h)
};

/// Pre-LN: x += attn(ln1(x)); [x += cross_attn(ln_cross(x), memory)]; x += mlp(ln2(x)).
/// Post-LN: x = ln1(x + attn(x)); [x = ln_cross(x + cross_attn(x, memory))]; x = ln2(x + mlp(x)).
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const BlockConfig& config, Generator* gen = nullptr);
  /// x [B, n, width]; memory [B, n_k, width] for a cross-attention block.
  /// When `weights` is given, the attention weights are appended to it
  /// (self-attention first, then cross-attention).
  Tensor forward(const Tensor& x, const MhaOptions& self_options, const Tensor& memory = Tensor(),
                 const MhaOptions& cross_options = {}, std::vector<Tensor>* weights = nullptr) const;

  /// Inference with a key/value cache (self-attention blocks only): new
  /// tokens x [B, t, width] at positions pos.., their keys and values kept in
  /// keys/values (see MultiHeadAttention::forward_cached).
  Tensor forward_cached(const Tensor& x, const Tensor& keys, const Tensor& values, int64_t pos,
                        const MhaOptions& self_options) const;

  std::shared_ptr<Norm> ln1, ln_cross, ln2;  // the parts' norm (LayerNorm by default)
  std::shared_ptr<MultiHeadAttention> attn, cross_attn;
  std::shared_ptr<FeedForward> mlp;  // the parts' mlp (MLP by default)

 private:
  BlockConfig config_;
  Generator* gen_;
};

/// x through every block with the same attention options. With
/// `checkpoint` (while grad mode is on and no weights are asked for) each
/// block keeps only its input and replays its forward in backward, its
/// dropout replayed from `gen` (autograd/recompute.h). `weights`, when given,
/// collects every block's attention weights.
Tensor run_blocks(const ModuleList<TransformerBlock>& blocks, Tensor x, const MhaOptions& options, bool checkpoint,
                  Generator* gen, std::vector<Tensor>* weights = nullptr);

}  // namespace qkv::nn
