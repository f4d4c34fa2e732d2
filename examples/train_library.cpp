// Training with the library alone, no qkv program: a small GPT learns to
// continue the cycle 0 1 2 ... 7 0 1 ... from any point, through the same
// Trainer that `qkv train` runs (train/trainer.h). ctest runs it; it exits 1
// unless the held-out loss falls below 0.05.
#include <cstdio>
#include <utility>

#include "nn/nn.h"
#include "optim/optim.h"
#include "train/trainer.h"

using namespace qkv;

int main() {
  // As `qkv train --threads 0`: a thread whose core another process is using holds every parallel loop up.
  set_num_threads(idle_threads());
  manual_seed(1);
  nn::GPT gpt({.vocab = 8, .context = 16, .width = 32, .heads = 2, .layers = 1});
  optim::AdamW opt(gpt.named_parameters(), {.lr = 3e-3});
  optim::ConstantLR schedule(3e-3);
  train::Trainer trainer(opt, schedule, {.steps = 300, .eval_every = 50});

  Generator data(2);
  auto batch = [&](int64_t rows) {  // inputs [rows, 16] from random starts, targets one ahead
    std::vector<int64_t> x, y;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0, start = static_cast<int64_t>(data.below(8)); t < 16; ++t)
        x.push_back((start + t) % 8), y.push_back((start + t + 1) % 8);
    return std::pair{Tensor::from_vector(x, {rows, 16}), Tensor::from_vector(y, {rows, 16})};
  };
  trainer.loss = [&](int64_t) {
    auto [x, y] = batch(16);
    return train::StepLoss{nn::cross_entropy(gpt.forward(x), y), 1, 16 * 16};
  };
  trainer.evaluate = [&](int64_t) {
    NoGradGuard no_grad;
    auto [x, y] = batch(64);
    double loss = nn::cross_entropy(gpt.forward(x), y).item();
    return train::Evaluation{loss, false, loss < 0.05, cat("held-out loss ", loss)};
  };
  trainer.on_step = [](const train::Progress& p) {
    if (p.evaluation) std::printf("%s  %s\n", train::progress_line(p, true).c_str(), p.evaluation->text.c_str());
  };
  train::Outcome out = trainer.run();
  std::printf("%s after %lld steps: held-out loss %.4f\n",
              out.reason == train::Outcome::Target ? "reached the target" : "stopped",
              static_cast<long long>(out.steps), out.last_metric);
  return out.last_metric < 0.05 ? 0 : 1;
}
