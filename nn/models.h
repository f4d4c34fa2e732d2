// Models: a decoder-only GPT and an encoder-decoder Seq2Seq transformer.
#pragma once

#include <memory>
#include <vector>

#include "nn/kv_cache.h"
#include "nn/transformer.h"

namespace qkv::nn {

struct GPTConfig {
  int64_t vocab = 256, context = 64, width = 128, heads = 4, layers = 2;
  double dropout = 0;
  bool post_ln = false;
  BlockParts parts;         // every block's norm and mlp, and the final norm's (nn/parts.h)
  AttentionKind attention;  // every layer's self-attention: full, window:W or linear
  bool checkpoint_activations =
      false;  // blocks keep only their input and replay their forward in backward (less memory; autograd/recompute.h)
  bool fused_attention = true;  // attention may take the fused kernel (MhaOptions::fused)
};

/// Decoder-only transformer with docs/architecture.md's parameter names:
/// tok_emb, pos_emb, blocks.{i}.{ln1, attn.{q,k,v,out}_proj, ln2, mlp.fc1, mlp.fc2}, ln_f
/// with the default parts (config.parts, nn/parts.h: other parts name their own).
/// Causal self-attention; the head is tied to tok_emb (logits = ln_f(x)·tok_embᵀ).
class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config, Generator* gen = nullptr);
  /// ids int64 [B, T] with T <= context -> logits [B, T, vocab]. With `weights`,
  /// appends each layer's attention weights [B, heads, T, T].
  Tensor forward(const Tensor& ids, std::vector<Tensor>* weights = nullptr) const;
  /// The final layer norm's output [B, T, width], what the tied head reads.
  Tensor hidden(const Tensor& ids, std::vector<Tensor>* weights = nullptr) const;
  /// cross_entropy(forward(ids), targets, ignore_index), through the fused
  /// head and loss (linear_cross_entropy): the [B, T, vocab] logits are never
  /// held whole. The same bits wherever they fit its one block.
  Tensor loss(const Tensor& ids, const Tensor& targets, std::vector<Tensor>* weights = nullptr,
              int64_t ignore_index = -100) const;
  /// Generation with a cache: ids [B, t] are the tokens at positions
  /// cache.length .. cache.length+t-1 -> their logits [B, t, vocab]; the cache
  /// then holds them too. Same logits as forward() on the whole prefix (up to
  /// float rounding). Inference only; not for linear attention (no cache to keep).
  Tensor forward_cached(const Tensor& ids, KVCache& cache) const;
  /// An empty cache for `batch` sequences of up to the context length.
  /// A cache for `batch` sequences of up to `positions` tokens (0: the context).
  KVCache make_cache(int64_t batch, int64_t positions = 0) const;
  /// Switches activation checkpointing (GPTConfig::checkpoint_activations) on or off.
  void set_checkpoint_activations(bool on) { config_.checkpoint_activations = on; }
  /// Whether attention may take the fused kernel (GPTConfig::fused_attention).
  void set_fused_attention(bool on) { config_.fused_attention = on; }
  const GPTConfig& config() const { return config_; }

  std::shared_ptr<Embedding> tok_emb, pos_emb;  // pos_emb null where the position part keeps no table (rope)
  std::shared_ptr<ModuleList<TransformerBlock>> blocks;
  std::shared_ptr<Norm> ln_f;  // the parts' norm

 private:
  GPTConfig config_;
  Generator* gen_;  // the blocks' dropout generator (recompute replays its state)
};

struct Seq2SeqConfig {
  int64_t vocab = 32, context = 32, width = 64, heads = 4, encoder_layers = 1, decoder_layers = 1;
  double dropout = 0;
  bool post_ln = false;
  BlockParts parts;                     // every block's norm and mlp, and the final norm's (nn/parts.h)
  AttentionKind attention;              // the encoder's and decoder's self-attention (cross-attention stays full)
  bool checkpoint_activations = false;  // as in GPTConfig
  bool fused_attention = true;          // as in GPTConfig
};

/// Encoder-decoder transformer for variable-length toy tasks. Parameters:
/// tok_emb and pos_emb (shared by both sides), encoder.{i}.*, encoder_ln,
/// decoder.{i}.{ln1, attn, ln_cross, cross_attn, ln2, mlp}.*, ln_f; the head
/// is tied to tok_emb. The encoder masks source padding; the decoder is
/// causal and masks source padding in cross-attention.
class Seq2Seq : public Module {
 public:
  explicit Seq2Seq(const Seq2SeqConfig& config, Generator* gen = nullptr);
  /// src int64 [B, S] with the true lengths per row -> memory [B, S, width].
  /// `weights`, when given, receives each layer's self-attention weights [B, heads, S, S].
  Tensor encode(const Tensor& src, const std::vector<int64_t>& src_lengths,
                std::vector<Tensor>* weights = nullptr) const;
  /// tgt int64 [B, T] -> logits [B, T, vocab], attending to `memory`.
  /// `weights`, when given, receives per layer the self-attention weights
  /// [B, heads, T, T], then the cross-attention weights [B, heads, T, S].
  Tensor decode(const Tensor& tgt, const Tensor& memory, const std::vector<int64_t>& src_lengths,
                std::vector<Tensor>* weights = nullptr) const;
  Tensor forward(const Tensor& src, const std::vector<int64_t>& src_lengths, const Tensor& tgt) const;
  void set_checkpoint_activations(bool on) { config_.checkpoint_activations = on; }
  /// Whether attention may take the fused kernel (GPTConfig::fused_attention).
  void set_fused_attention(bool on) { config_.fused_attention = on; }
  const Seq2SeqConfig& config() const { return config_; }

  std::shared_ptr<Embedding> tok_emb, pos_emb;  // pos_emb null where the position part keeps no table (rope)
  std::shared_ptr<ModuleList<TransformerBlock>> encoder, decoder;
  std::shared_ptr<Norm> encoder_ln, ln_f;  // the parts' norm

 private:
  Tensor embed(const char* who, const Tensor& ids) const;
  Seq2SeqConfig config_;
  Generator* gen_;
};

}  // namespace qkv::nn
