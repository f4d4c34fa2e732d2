// A study of one forward: its loss with every attention map it formed, each
// attention call's q and k, and the input's token embeddings, kept with their
// graph so that one backward gives dL/dP, dL/dq, dL/dk and dL/de. Maps come
// through nn::AttentionRecording, the one interface every attention part
// reports its weights to, whatever it computes. study/page.h draws a study.
//
//   qkv::study::Study s = qkv::study::record([&] { return model.loss(ids, targets); });
//   qkv::study::write_page("my_model.html", s, model, {.title = "my model"});
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace qkv::study {

/// One attention call's weights for one input, ready to draw.
struct AttentionMap {
  std::string name;                     // "layer 0", "decoder layer 1, cross-attention", ...
  std::string file;                     // a file-name stem: "layer0", "decoder1_cross"
  Tensor weights;                       // [heads, rows, cols] or [1, heads, rows, cols]
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
/// Undefined for a call whose score is not the scaled dot product.
struct ScoreInputs {
  Tensor q, k;
  double scale = 1;
};

/// A loss with the attention maps of the forward that computed it: each
/// map's weights keep their graph and retain their gradient, so after
/// loss.backward() weights.grad() is dL/dP.
struct Study {
  Tensor loss;
  std::string what = "loss";  // what the loss measures
  std::vector<AttentionMap> maps;
  std::vector<ScoreInputs> inputs;  // one per map, in the same order
  /// The input's token embeddings e [1, T, width] (the forward's first
  /// nn::Embedding lookup), retaining dL/de; undefined for a model that looks
  /// up none (a ViT reads pixels).
  Tensor embedding;
  std::vector<std::string> embedded;  // those T tokens, as maps label them
};

/// Makes maps of every attention call's weights, in call order: one map per call.
using Labeller = std::function<std::vector<AttentionMap>(const std::vector<Tensor>& weights)>;

/// Runs `loss` (a forward that returns a scalar) once with every attention
/// call recorded (nn::AttentionRecording; a fused kernel forms its weights
/// then), the autograd graph's nodes named by module (GraphRecording), and
/// the first embedding lookup kept. `label` makes the maps of the calls'
/// weights; every map, its call's q and k and the embedding retain their
/// gradients.
Study record(const std::function<Tensor()>& loss, const Labeller& label);

/// record() with plain labels: map k is the k-th call's weights (the first
/// input of a batch), named "attention k", its rows and columns (and the
/// embedded tokens) labelled by `tokens` where their count matches, else by
/// position; causal where every weight past the diagonal is exactly 0 (a
/// masked softmax's). Rename or relabel the maps before drawing them to say more.
Study record(const std::function<Tensor()>& loss, const std::vector<std::string>& tokens = {});

/// Token attribution: for each input token t, dL/de_t · e_t (gradient ×
/// input over its embedding), the derivative of the loss as that token's
/// embedding is scaled, d/dα L(α·e_t) at α = 1. Needs backward() to have run.
std::vector<double> token_attribution(const Study& s);

}  // namespace qkv::study
