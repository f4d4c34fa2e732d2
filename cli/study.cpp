#include "study.h"

namespace qkv::cli {

Study study(Runner& runner, const std::string& prompt) {
  QKV_CHECK(runner.spec().attention != "linear",
            "this model uses linear attention, which never forms the n x n weights a study shows "
            "(train with --attention full or window:W)");
  runner.module().eval();
  Study s;
  Example e = runner.task().prompt_example(prompt, &s.what);
  s.loss = runner.driver().study(runner, e, s.maps);
  for (AttentionMap& m : s.maps)
    if (m.weights.requires_grad()) m.weights.retain_grad();  // dL/dP, once backward() has run (none under NoGradGuard)
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
