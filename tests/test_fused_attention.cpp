// The fused attention kernel against the composed path it replaces
// (nn::scaled_dot_product_attention): outputs and gradients agree to 1e-12 in
// float64 and 1e-5 (relative) in float32, masks and block edges included;
// MHA and a GPT give the same numbers with the kernel on and off.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "attention_reference.h"
#include "autograd/ops/attention.h"
#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;

namespace {

// Every element of a and b within atol + rtol·|b|.
void check_close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  REQUIRE(a.shape() == b.shape());
  CHECK(testing::worst_excess(a, b, rtol) <= atol);
}

struct Case {
  const char* label;
  int64_t B, nq, nk, H, d, dv;
  AttentionMasks masks;
};

void compare(const Case& c, DType dtype, double atol, double rtol) {
  INFO(c.label << " in " << dtype_name(dtype));
  Generator gen(11);
  auto leaf = [&](Shape s) { return Tensor::randn(s, dtype, &gen).requires_grad_(); };
  Tensor q = leaf({c.B, c.nq, c.H, c.d}), k = leaf({c.B, c.nk, c.H, c.d}), v = leaf({c.B, c.nk, c.H, c.dv});
  Tensor g = Tensor::randn({c.B, c.nq, c.H, c.dv}, dtype, &gen);
  AttentionMasks masks = c.masks;
  if (masks.mask.defined() && masks.mask.dtype() != DType::Bool) masks.mask = masks.mask.to(dtype);
  Tensor fused = fused_attention(q, k, v, masks, 1.0 / std::sqrt(static_cast<double>(c.d)));
  fused.backward(g);
  std::vector<Tensor> fused_grads{q.grad(), k.grad(), v.grad()};
  for (Tensor* t : {&q, &k, &v}) t->zero_grad();
  Tensor reference = testing::composed_attention(q, k, v, masks);
  reference.backward(g);
  check_close(fused, reference, atol, rtol);
  check_close(fused_grads[0], q.grad(), atol, rtol);
  check_close(fused_grads[1], k.grad(), atol, rtol);
  check_close(fused_grads[2], v.grad(), atol, rtol);
}

std::vector<Case> cases() {
  Generator gen(4);
  double inf = std::numeric_limits<double>::infinity();
  Tensor float_mask = Tensor::randn({2, 1, 70, 90}, DType::Float64, &gen);
  float_mask.set({0, 0, 3, 5}, -inf);
  Tensor bool_mask = Tensor::rand({70, 90}, DType::Float64, &gen).to(DType::Float32);
  std::vector<bool> allowed(70 * 90);
  for (int64_t i = 0; i < 70 * 90; ++i) allowed[i] = bool_mask.data<float>()[i] < 0.7f;
  for (int64_t j = 0; j < 90; ++j) allowed[7 * 90 + j] = false;  // query 7 sees nothing
  Tensor padding = key_padding_mask({90, 41}, 90);
  return {
      {"no mask, one block", 2, 5, 5, 2, 4, 4, {}},
      {"causal, 200 tokens: several query and key blocks", 2, 200, 200, 2, 8, 8, {{}, {}, true}},
      {"causal, 600 tokens: an online softmax across 512-key blocks, 512-query spans in backward",
       1,
       600,
       600,
       1,
       4,
       4,
       {{}, {}, true}},
      {"cross 530 x 700, padding: every block edge",
       2,
       530,
       700,
       1,
       3,
       2,
       {{}, key_padding_mask({700, 517}, 700), false}},
      {"cross 70 x 90, d_v != d, key padding", 2, 70, 90, 3, 4, 6, {{}, padding, false}},
      {"bool [n_q, n_k] mask with a fully masked row",
       2,
       70,
       90,
       2,
       4,
       4,
       {Tensor::from_vector(allowed, {70, 90}), {}, false}},
      {"float [B, 1, n_q, n_k] mask + padding + causal", 2, 70, 90, 2, 4, 4, {float_mask, padding, true}},
      {"every key of one sequence padded", 2, 6, 6, 1, 3, 3, {{}, key_padding_mask({6, 0}, 6), false}},
  };
}

}  // namespace

TEST_CASE("fused attention equals the composed path in float64 to 1e-12, gradients included", "[attention][fused]") {
  for (const Case& c : cases()) compare(c, DType::Float64, 1e-12, 0);
}

TEST_CASE("fused attention equals the composed path in float32 to 1e-5 relative", "[attention][fused]") {
  for (const Case& c : cases()) compare(c, DType::Float32, 1e-6, 1e-5);
}

TEST_CASE("fused attention: fully masked queries give zeros and zero gradients, never NaN", "[attention][fused]") {
  Tensor q = Tensor::randn({1, 3, 1, 2}).requires_grad_(), k = Tensor::randn({1, 3, 1, 2}).requires_grad_(),
         v = Tensor::randn({1, 3, 1, 2}).requires_grad_();
  AttentionMasks m{
      Tensor::from_vector(std::vector<bool>{false, false, false, true, true, false, false, false, false}, {3, 3}),
      {},
      false};
  Tensor out = fused_attention(q, k, v, m, 0.5);
  out.backward(Tensor::ones(out.shape()));
  for (int64_t r : {0, 2})
    for (int64_t c = 0; c < 2; ++c) CHECK(out.at({0, r, 0, c}) == 0.0);
  for (const Tensor& t : {q.grad(), k.grad(), v.grad()})
    for (double x : t.to_vector()) CHECK(std::isfinite(x));
  CHECK(q.grad().at({0, 0, 0, 0}) == 0.0);
  CHECK(q.grad().at({0, 2, 0, 1}) == 0.0);
}

TEST_CASE("fused attention rejects shapes and masks that do not fit, naming them", "[attention][fused][errors]") {
  Tensor q = Tensor::randn({1, 3, 2, 4}), k = Tensor::randn({1, 5, 2, 4}), v = Tensor::randn({1, 5, 2, 3});
  CHECK_THROWS_AS(fused_attention(q, Tensor::randn({1, 5, 2, 3}), v, {}, 1), Error);
  CHECK_THROWS_AS(fused_attention(q, k, Tensor::randn({1, 4, 2, 3}), {}, 1), Error);
  CHECK_THROWS_AS(fused_attention(Tensor::randn({3, 2, 4}), k, v, {}, 1), Error);
  CHECK_THROWS_WITH(fused_attention(q, k, v, {Tensor::ones({3, 4}, DType::Bool), {}, false}, 1),
                    Catch::Matchers::Contains("does not broadcast"));
  CHECK_THROWS_WITH(fused_attention(q, k, v, {{}, Tensor::ones({1, 4}, DType::Bool), false}, 1),
                    Catch::Matchers::Contains("key_padding"));
  CHECK_THROWS_WITH(fused_attention(q, k, v, {Tensor::zeros({3, 5}).requires_grad_(), {}, false}, 1),
                    Catch::Matchers::Contains("composed path"));
}

TEST_CASE("fused_self_attention rejects a packed input that is not [B, n, 3, heads, d]", "[attention][fused][errors]") {
  CHECK_THROWS_WITH(fused_self_attention(Tensor::randn({1, 4, 2, 2, 3}), {}, 1),
                    Catch::Matchers::Contains("[B, n, 3, heads, d]"));
  CHECK_THROWS_WITH(fused_self_attention(Tensor::randn({4, 3, 2, 3}), {}, 1),
                    Catch::Matchers::Contains("[B, n, 3, heads, d]"));
  CHECK_THROWS_WITH(
      fused_self_attention(Tensor::randn({1, 4, 3, 2, 3}), {{}, Tensor::ones({1, 5}, DType::Bool), false}, 1),
      Catch::Matchers::Contains("key_padding"));
}

TEST_CASE("a GPT gives the same logits and gradients with the fused kernel on and off", "[attention][fused][models]") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    GPTConfig c;
    c.vocab = 20, c.context = 70, c.width = 16, c.heads = 2, c.layers = 2;
    Generator init(3);
    GPT gpt(c, &init);
    gpt.to(dtype);
    Tensor ids = Tensor::randint(0, 20, {2, 70}, &init), targets = Tensor::randint(0, 20, {2, 70}, &init);
    auto run = [&](bool fused) {
      gpt.set_fused_attention(fused);
      gpt.zero_grad();
      Tensor logits = gpt.forward(ids);
      cross_entropy(logits, targets).backward();
      std::vector<Tensor> out{logits.detach()};
      for (const auto& [name, p] : gpt.named_parameters())  // no gradient (the key biases') is an exact zero
        out.push_back(p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype()));
      return out;
    };
    std::vector<Tensor> fused = run(true), composed = run(false);
    double atol = dtype == DType::Float64 ? 1e-12 : 1e-7, rtol = dtype == DType::Float64 ? 0 : 1e-5;
    for (size_t i = 0; i < fused.size(); ++i) check_close(fused[i], composed[i], atol, rtol);
  }
}

TEST_CASE("the packed self-attention kernel equals the three-tensor one, gradients included", "[attention][fused]") {
  Generator gen(8);
  Tensor qkv = Tensor::randn({2, 90, 3, 2, 4}, DType::Float64, &gen).requires_grad_();
  Tensor g = Tensor::randn({2, 90, 2, 4}, DType::Float64, &gen);
  AttentionMasks masks{{}, key_padding_mask({90, 50}, 90), true};
  Tensor packed = fused_self_attention(qkv, masks, 0.5);
  packed.backward(g);
  Tensor packed_grad = qkv.grad();
  qkv.zero_grad();
  auto part = [&](int64_t i) { return squeeze(narrow(qkv, 2, i, 1), 2); };
  Tensor split = fused_attention(part(0), part(1), part(2), masks, 0.5);
  split.backward(g);
  check_close(packed, split, 1e-13, 0);
  check_close(packed_grad, qkv.grad(), 1e-13, 0);
}
