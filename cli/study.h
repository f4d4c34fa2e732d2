// A prompt's attention maps, to draw them (qkv attention) or to study them
// with their gradients (qkv explore): each map's weights per head, labelled
// as the model reads its tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner.h"

namespace qkv::cli {

/// One layer's attention weights for one input, ready to draw.
struct AttentionMap {
  std::string name;                     // "layer 0", "decoder layer 1, cross-attention", ...
  std::string file;                     // a file-name stem: "layer0", "decoder1_cross"
  Tensor weights;                       // [heads, rows, cols]
  std::vector<std::string> rows, cols;  // token labels: queries down, keys across
  int64_t split = -1;                   // > 0: where the answer starts (on both axes)
  bool cls_first = false;               // row and column 0 are a classifier's [CLS] token
  bool causal = false;                  // a query sees no later key (masked cells: those past the diagonal)
  std::vector<double> image;            // a ViT's input image in [0, 1], row-major, under the [CLS] row's grid
  int64_t image_side = 0, patch = 0;    // its side and the patch side (columns 1.. are its patches, row-major)
};

/// What one attention call scored: q [1, heads, n_q, d] and k [1, heads,
/// n_k, d] as they entered the score (each score is scale·Σ_d q_d·k_d),
/// retaining their gradients, so after loss.backward() q.grad() is dL/dq.
struct ScoreInputs {
  Tensor q, k;
  double scale = 1;
};

/// A prompt's loss with the attention maps of the forward that computed it:
/// each map's weights [1, heads, rows, cols] keep their graph and retain
/// their gradient, so after loss.backward() weights.grad() is dL/dP.
struct Study {
  Tensor loss;
  std::string what;  // what the loss measures
  std::vector<AttentionMap> maps;
  std::vector<ScoreInputs> inputs;  // one per map, in the same order
  /// The input's token embeddings e [1, T, width] (the forward's first
  /// embedding lookup: a GPT's prompt, a Seq2Seq's source), retaining dL/de;
  /// undefined for a model that looks up none (a ViT reads pixels).
  Tensor embedding;
  std::vector<std::string> embedded;  // those T tokens, as maps label them
};

/// Token attribution: for each input token t, dL/de_t · e_t (gradient ×
/// input over its embedding), the derivative of the loss as that token's
/// embedding is scaled, d/dα L(α·e_t) at α = 1. Needs backward() to have run.
std::vector<double> token_attribution(const Study& s);

/// The study's loss with token t's embedding scaled by `scale` (no graph):
/// what --check differentiates to check token_attribution.
double loss_with_token_scaled(Runner& runner, const std::string& prompt, int64_t t, double scale);

/// Every attention map of the model on a prompt (for a task model: the
/// prompt and the model's own answer). A GPT gives one per layer; a
/// Seq2Seq the encoder's self-attention, the decoder's self-attention and
/// its cross-attention to the source, per layer.
std::vector<AttentionMap> attention_maps(Runner& runner, const std::string& prompt);

/// The prompt's loss (Task::prompt_example) and every attention map of its
/// forward, ready for loss.backward() (asking for the weights takes the
/// composed attention path).
Study study(Runner& runner, const std::string& prompt);

}  // namespace qkv::cli
