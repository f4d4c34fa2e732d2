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
  std::string what;
  Example e = runner.task().prompt_example(prompt, &what);
  Study s =
      study::record([&] { return runner.driver().study_loss(runner, e); },
                    [&](const std::vector<Tensor>& weights) { return runner.driver().study_maps(runner, e, weights); });
  s.what = what;
  if (s.embedding.defined()) {
    const int64_t T = s.embedding.dim() >= 2 ? s.embedding.size(-2) : 0;
    // As the prompt's tokens, or as the first map's keys (a GPT on a task reads its input and answer at once).
    const bool as_input = static_cast<int64_t>(e.input.size()) == T,
               as_keys = !s.maps.empty() && static_cast<int64_t>(s.maps[0].cols.size()) == T;
    for (int64_t t = 0; t < T; ++t)
      s.embedded.push_back(as_input  ? runner.task().token_text(e.input[t])
                           : as_keys ? s.maps[0].cols[t]
                                     : cat("token ", t));
  }
  for (size_t k = 0; k < s.maps.size(); ++k)
    QKV_CHECK(s.inputs[k].q.defined(), "study: attention call ", k, " did not score by the scaled dot product");
  return s;
}

double loss_with_token_scaled(Runner& runner, const std::string& prompt, int64_t t, double scale) {
  NoGradGuard no_grad;
  nn::EmbeddingEdit scaled([&](int64_t call, const Tensor& rows) {
    if (call != 0) return rows;
    std::vector<double> by(static_cast<size_t>(rows.size(-2)), 1.0);
    by[static_cast<size_t>(t)] = scale;
    return mul(rows, Tensor::from_vector(by, {rows.size(-2), 1}).to(rows.dtype()).to(rows.device()));
  });
  double loss = 0;  // recorded as the study is, so that it takes the same (composed) attention path
  nn::record_attention(
      [&] { loss = runner.driver().study_loss(runner, runner.task().prompt_example(prompt, nullptr)).item(); });
  return loss;
}

std::vector<AttentionMap> attention_maps(Runner& runner, const std::string& prompt) {
  NoGradGuard no_grad;
  runner.module().eval();
  QKV_CHECK(runner.spec().attention != "linear",
            "this model uses linear attention, which never forms the n x n weight "
            "matrix a map would show (train with --attention full or window:W for maps)");
  return runner.driver().attention(runner, prompt);
}

int64_t attention_window(const ModelSpec& spec) {
  return spec.attention.rfind("window:", 0) == 0 ? std::stoll(spec.attention.substr(7)) : 0;
}

}  // namespace qkv::cli
