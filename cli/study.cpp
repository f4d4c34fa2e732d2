#include "study.h"

#include "autograd/ops/elementwise.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace qkv::cli {

Study study(Runner& runner, const std::string& prompt) {
  QKV_CHECK(runner.spec().attention != "linear",
            "this model uses linear attention, which never forms the n x n weights a study shows "
            "(train with --attention full or window:W)");
  runner.module().eval();
  Study s;
  Example e = runner.task().prompt_example(prompt, &s.what);
  {
    nn::AttentionInputsTap tap([&](int64_t, const Tensor& q, const Tensor& k, double scale) {
      s.inputs.push_back({q, k, scale});
    });
    nn::EmbeddingEdit keep([&](int64_t call, const Tensor& rows) {
      if (call == 0) s.embedding = rows;
      return rows;
    });
    s.loss = runner.driver().study(runner, e, s.maps);
  }
  if (s.embedding.defined()) {
    if (s.embedding.requires_grad()) s.embedding.retain_grad();
    const int64_t T = s.embedding.dim() >= 2 ? s.embedding.size(-2) : 0;
    // As the prompt's tokens, or as the first map's keys (a GPT on a task reads its input and answer at once).
    const bool as_input = static_cast<int64_t>(e.input.size()) == T,
               as_keys = !s.maps.empty() && static_cast<int64_t>(s.maps[0].cols.size()) == T;
    for (int64_t t = 0; t < T; ++t)
      s.embedded.push_back(as_input  ? runner.task().token_text(e.input[t])
                           : as_keys ? s.maps[0].cols[t]
                                     : cat("token ", t));
  }
  QKV_CHECK(s.inputs.size() == s.maps.size(), "study: ", s.maps.size(), " maps but ", s.inputs.size(),
            " scaled dot-product attention calls");
  // dL/dP, dL/dq and dL/dk once backward() has run (none under NoGradGuard).
  for (AttentionMap& m : s.maps)
    if (m.weights.requires_grad()) m.weights.retain_grad();
  for (ScoreInputs& in : s.inputs)
    for (Tensor* t : {&in.q, &in.k})
      if (t->requires_grad()) t->retain_grad();
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

double loss_with_token_scaled(Runner& runner, const std::string& prompt, int64_t t, double scale) {
  NoGradGuard no_grad;
  nn::EmbeddingEdit scaled([&](int64_t call, const Tensor& rows) {
    if (call != 0) return rows;
    std::vector<double> by(static_cast<size_t>(rows.size(-2)), 1.0);
    by[static_cast<size_t>(t)] = scale;
    return mul(rows, Tensor::from_vector(by, {rows.size(-2), 1}).to(rows.dtype()).to(rows.device()));
  });
  std::vector<AttentionMap> maps;
  return runner.driver().study(runner, runner.task().prompt_example(prompt, nullptr), maps).item();
}

std::vector<AttentionMap> attention_maps(Runner& runner, const std::string& prompt) {
  NoGradGuard no_grad;
  runner.module().eval();
  QKV_CHECK(runner.spec().attention != "linear",
            "this model uses linear attention, which never forms the n x n weight "
            "matrix a map would show (train with --attention full or window:W for maps)");
  return runner.driver().attention(runner, prompt);
}

}  // namespace qkv::cli
