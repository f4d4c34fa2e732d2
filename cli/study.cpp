#include "study.h"

#include "nn/attention.h"

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
    s.loss = runner.driver().study(runner, e, s.maps);
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

std::vector<AttentionMap> attention_maps(Runner& runner, const std::string& prompt) {
  NoGradGuard no_grad;
  runner.module().eval();
  QKV_CHECK(runner.spec().attention != "linear",
            "this model uses linear attention, which never forms the n x n weight "
            "matrix a map would show (train with --attention full or window:W for maps)");
  return runner.driver().attention(runner, prompt);
}

}  // namespace qkv::cli
