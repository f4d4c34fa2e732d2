// A tiny but complete training run (GPT with dropout, AdamW, cosine schedule,
// gradient clipping, batches drawn from the default generator), shared by the
// in-process and the cross-process resume tests.
#pragma once

#include <cstring>
#include <string>

#include "io/metadata.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace tiny {

using namespace qkv;

inline nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab = 12, c.context = 8, c.width = 16, c.heads = 2, c.layers = 2, c.dropout = 0.1;
  return c;
}

inline optim::AdamOptions adam_options() {
  optim::AdamOptions o;
  o.lr = 3e-3, o.weight_decay = 0.1;
  return o;
}

struct Run {
  nn::GPT model{config()};
  optim::AdamW optimizer{model.named_parameters(), adam_options()};
  optim::CosineLR schedule{3e-3, 3, 40, 1e-4};

  /// Trains until the optimizer has taken `total` steps.
  void train_until(int64_t total) {
    while (optimizer.steps() < total) {
      optimizer.set_lr(schedule.lr(optimizer.steps()));
      Tensor ids = Tensor::randint(0, 12, {4, 8});  // from the default generator, like dropout
      Tensor targets = Tensor::randint(0, 12, {4, 8});
      optimizer.zero_grad();
      nn::cross_entropy(model.forward(ids), targets).backward();
      optim::clip_grad_norm(optimizer.params(), 1.0);
      optimizer.step();
    }
  }
  void save(const std::string& path) const {
    optim::save_training_checkpoint(
        path, model, &optimizer, {{"default", &default_generator()}},
        {{"qkv.model", "gpt"},
         {"qkv.config",
          io::json_object({{"vocab", "12"}, {"context", "8"}, {"width", "16"}, {"heads", "2"}, {"layers", "2"}})}});
  }
  void load(const std::string& path) {
    optim::load_training_checkpoint(path, model, &optimizer, {{"default", &default_generator()}});
  }
};

/// True when every parameter of both runs is bit-identical.
inline bool same_parameters(const Run& a, const Run& b) {
  auto pa = a.model.parameters(), pb = b.model.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (std::memcmp(pa[i].raw_data(), pb[i].raw_data(), pa[i].numel() * element_size(pa[i].dtype())) != 0) return false;
  return true;
}

}  // namespace tiny
