// Activation checkpointing (recompute) and the attention-entropy term:
// recomputed gradients are bit-identical to stored ones, dropout included,
// and both pass float64 gradient checks.
#include <catch2/catch.hpp>

#include <cmath>

#include "nn/nn.h"
#include "test_helpers.h"

using namespace qkv;
using namespace qkv::nn;

namespace {
using testing::ids;

// Loss and every parameter gradient of one training step from a fixed generator state.
std::vector<std::vector<double>> step(const Module& model, const std::function<Tensor()>& loss,
                                      Generator* gen = nullptr) {
  manual_seed(77);
  if (gen) gen->manual_seed(78);  // the model's dropout generator
  for (auto& [name, p] : model.named_parameters()) p.zero_grad();
  Tensor l = loss();
  l.backward();
  std::vector<std::vector<double>> out{l.to_vector()};
  for (auto& [name, p] : model.named_parameters())  // no gradient (the key biases') is an exact zero
    out.push_back(p.grad().defined() ? p.grad().to_vector() : std::vector<double>(p.numel(), 0.0));
  return out;
}
}  // namespace

TEST_CASE("a recomputed GPT gives bit-identical loss and gradients, dropout on", "[recompute][models]") {
  for (DType dtype : {DType::Float32, DType::Float64})
    for (bool post_ln : {false, true}) {
      INFO(dtype_name(dtype) << (post_ln ? " post-LN" : " pre-LN"));
      GPTConfig c;
      c.vocab = 9, c.context = 8, c.width = 8, c.heads = 2, c.layers = 3, c.dropout = 0.2, c.post_ln = post_ln;
      Generator init(4);
      GPT gpt(c, &init);
      gpt.to(dtype);
      Tensor x = ids({1, 4, 2, 6, 0, 3, 3, 5, 8, 7, 1, 2, 0, 0, 4, 5}, {2, 8}),
             y = ids({4, 2, 6, 0, 3, 3, 5, 1, 7, 1, 2, 0, 0, 4, 5, 6}, {2, 8});
      auto loss = [&] { return cross_entropy(gpt.forward(x), y); };
      auto stored = step(gpt, loss, &init);
      gpt.set_checkpoint_activations(true);
      auto recomputed = step(gpt, loss, &init);
      gpt.set_checkpoint_activations(false);
      REQUIRE(stored.size() == recomputed.size());
      auto names = gpt.named_parameters();
      for (size_t i = 0; i < stored.size(); ++i) {
        INFO((i == 0 ? std::string("loss") : names[i - 1].first));
        CHECK(stored[i] == recomputed[i]);
      }
    }
}

TEST_CASE("a recomputed Seq2Seq gives bit-identical gradients, dropout on", "[recompute][models]") {
  Seq2SeqConfig c;
  c.vocab = 9, c.context = 6, c.width = 8, c.heads = 2, c.dropout = 0.2;
  Seq2Seq model(c);
  Tensor src = ids({1, 2, 3, 4, 5, 0}, {2, 3}), tgt = ids({1, 2, 3, 4, 5, 6}, {2, 3}),
         out = ids({2, 3, 4, 5, 6, 7}, {2, 3});
  auto loss = [&] { return cross_entropy(model.forward(src, {3, 2}, tgt), out); };
  auto stored = step(model, loss);
  model.set_checkpoint_activations(true);
  CHECK(stored == step(model, loss));
}

TEST_CASE("a recomputed GPT with dropout passes a float64 gradient check", "[recompute][gradcheck]") {
  GPTConfig c;
  c.vocab = 7, c.context = 5, c.width = 8, c.heads = 2, c.layers = 2, c.dropout = 0.1, c.checkpoint_activations = true;
  GPT gpt(c);
  gpt.to(DType::Float64);
  Tensor input = ids({1, 4, 2, 6, 0, 3, 3, 5}, {2, 4}), targets = ids({4, 2, 6, -100, 3, 3, 5, 1}, {2, 4});
  GradcheckResult r =
      gradcheck_leaves([&] { return cross_entropy(gpt.forward(input), targets); }, gpt.named_parameters());
  INFO(r.summary());
  CHECK(r.ok);
}

TEST_CASE("recompute needs no input that requires grad and leaves the generator where backward found it",
          "[recompute]") {
  Tensor w = Tensor::randn({3}, DType::Float64).requires_grad_();
  Generator gen(5);
  Tensor x = Tensor::randn({3}, DType::Float64);
  Tensor out =
      recompute([&](const std::vector<Tensor>& in) { return sum(dropout(in[0] * w, 0.5, true, &gen)); }, {x}, &gen);
  Generator::State after_forward = gen.state();
  out.backward();
  CHECK(gen.state() == after_forward);
  CHECK(w.grad().defined());
}

TEST_CASE("attention entropy: its value and a float64 gradient check, masked rows included", "[entropy][gradcheck]") {
  Tensor p = Tensor::from_vector(std::vector<double>{0.5, 0.5, 0, 1, 0, 0, 0.25, 0.25, 0.5}, {3, 3});
  double expected = (std::log(2.0) + 0 + 1.5 * std::log(2.0)) / 3;
  CHECK(attention_entropy({p}).item() == Approx(expected).margin(1e-9));
  CHECK(attention_entropy({Tensor::zeros({2, 4}, DType::Float64)}).item() == 0.0);  // fully masked rows
  auto f = [](const std::vector<Tensor>& x) {
    Tensor masked = masked_fill(x[0],
                                Tensor::from_vector(std::vector<bool>{false, true, false, false, false, false, true,
                                                                      true, true, false, false, false},
                                                    {1, 3, 4}),
                                -std::numeric_limits<double>::infinity());
    return attention_entropy({softmax(x[0], -1), softmax(masked, -1)});
  };
  GradcheckResult r = gradcheck(f, {Tensor::randn({2, 3, 4}, DType::Float64)});
  INFO(r.summary());
  CHECK(r.ok);
  CHECK_THROWS_AS(attention_entropy({}), Error);
}

TEST_CASE("a GPT loss with the entropy term passes a float64 gradient check", "[entropy][gradcheck]") {
  GPTConfig c;
  c.vocab = 7, c.context = 5, c.width = 8, c.heads = 2, c.layers = 2;
  GPT gpt(c);
  gpt.to(DType::Float64);
  Tensor input = ids({1, 4, 2, 6, 0, 3, 3, 5}, {2, 4}), targets = ids({4, 2, 6, 1, 3, 3, 5, 1}, {2, 4});
  GradcheckResult r = gradcheck_leaves(
      [&] {
        std::vector<Tensor> weights;
        Tensor logits = gpt.forward(input, &weights);
        return cross_entropy(logits, targets) + attention_entropy(weights) * -0.3;
      },
      gpt.named_parameters());
  INFO(r.summary());
  CHECK(r.ok);
}

TEST_CASE("a segment that returns its input unchanged is recomputed through an alias", "[recompute]") {
  // (an identity, or a dropout in eval mode: recording onto the input itself made a self-loop)
  Tensor x = Tensor::from_vector<double>({1, 2}).requires_grad_();
  Tensor h = x * 3.0;
  Tensor y = recompute([](const std::vector<Tensor>& in) { return in[0]; }, {h});
  sum(y * y).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{18, 36});
}
