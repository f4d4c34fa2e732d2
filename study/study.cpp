// record(): one forward with every attention call and the first embedding
// lookup kept, through the library's taps (study/study.h).
#include "study/study.h"

#include <optional>

#include "autograd/engine.h"
#include "autograd/ops/shape.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace qkv::study {

namespace {

// Labels for n positions: the tokens where there are n of them, else "0", "1", ...
std::vector<std::string> labels_for(int64_t n, const std::vector<std::string>& tokens) {
  if (static_cast<int64_t>(tokens.size()) == n) return tokens;
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

// Every weight of every head past the diagonal is exactly 0: what a causal mask's −inf leaves after softmax.
bool looks_causal(const Tensor& weights) {
  const int64_t rows = weights.size(-2), cols = weights.size(-1);
  if (rows != cols || rows < 2) return false;
  const std::vector<double> w = weights.to_vector();
  for (size_t at = 0; at < w.size(); at += static_cast<size_t>(rows * cols))
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = i + 1; j < cols; ++j)
        if (w[at + i * cols + j] != 0) return false;
  return true;
}

// A recorded call's weights as a map: the batch's first input, [1, heads, rows, cols].
AttentionMap map_of(const Tensor& recorded, size_t k, const std::vector<std::string>& tokens) {
  QKV_CHECK(recorded.dim() >= 2, "study: attention call ", k, " reported weights ", shape_str(recorded.shape()),
            "; a map needs [..., n_q, n_k]");
  Tensor w = recorded;
  while (w.dim() > 4) w = squeeze(narrow(w, 0, 0, 1), 0);  // leading batch dims: the first input
  while (w.dim() < 4) w = unsqueeze(w, 0);
  if (w.size(0) > 1) w = narrow(w, 0, 0, 1);
  AttentionMap m;
  m.name = cat("attention ", k), m.file = cat("attention", k), m.weights = w;
  m.rows = labels_for(w.size(-2), tokens), m.cols = labels_for(w.size(-1), tokens);
  m.causal = looks_causal(w);
  return m;
}

// dL/dP, dL/dq, dL/dk and dL/de once backward() has run (none under NoGradGuard).
void retain_study_grads(Study& s) {
  for (AttentionMap& m : s.maps)
    if (m.weights.requires_grad()) m.weights.retain_grad();
  for (ScoreInputs& in : s.inputs)
    for (Tensor* t : {&in.q, &in.k})
      if (t->defined() && t->requires_grad()) t->retain_grad();
  if (s.embedding.defined() && s.embedding.requires_grad()) s.embedding.retain_grad();
}

}  // namespace

Study record(const std::function<Tensor()>& loss, const Labeller& label) {
  Study s;
  std::vector<Tensor> weights;
  std::optional<ScoreInputs> pending;  // the scaled dot product's q and k, until its weights are reported
  {
    GraphRecording names;  // graph nodes get their module's name, for the page's graph view
    nn::AttentionInputsTap tap([&](int64_t, const Tensor& q, const Tensor& k, double scale) {
      pending = ScoreInputs{q, k, scale};
    });
    nn::AttentionRecording calls([&](const Tensor& w) {
      weights.push_back(w);
      s.inputs.push_back(pending.value_or(ScoreInputs{}));
      pending.reset();
    });
    nn::EmbeddingEdit keep([&](int64_t call, const Tensor& rows) {
      if (call == 0) s.embedding = rows;
      return rows;
    });
    s.loss = loss();
  }
  QKV_CHECK(s.loss.defined() && s.loss.numel() == 1, "study: the loss must be a scalar, got ",
            s.loss.defined() ? shape_str(s.loss.shape()) : std::string("an undefined tensor"));
  s.maps = label(weights);
  QKV_CHECK(s.maps.size() == weights.size(), "study: ", weights.size(), " attention calls labelled as ", s.maps.size(),
            " maps");
  retain_study_grads(s);
  return s;
}

Study record(const std::function<Tensor()>& loss, const std::vector<std::string>& tokens) {
  Study s = record(loss, [&](const std::vector<Tensor>& weights) {
    std::vector<AttentionMap> maps;
    for (size_t k = 0; k < weights.size(); ++k) maps.push_back(map_of(weights[k], k, tokens));
    return maps;
  });
  if (s.embedding.defined()) s.embedded = labels_for(s.embedding.dim() >= 2 ? s.embedding.size(-2) : 0, tokens);
  return s;
}

std::vector<double> token_attribution(const Study& s) {
  QKV_CHECK(s.embedding.defined() && s.embedding.grad().defined(), "token attribution: no embedding gradient");
  const std::vector<double> e = s.embedding.to_vector(), g = s.embedding.grad().to_vector();
  const int64_t width = s.embedding.size(-1), T = static_cast<int64_t>(e.size()) / width;
  std::vector<double> out(static_cast<size_t>(T), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < width; ++d) out[t] += g[t * width + d] * e[t * width + d];  // dL/de_t · e_t
  return out;
}

}  // namespace qkv::study
