// Attention: scoring functions, masks and their combinations, scaled
// dot-product attention, multi-head attention (self and cross), hard
// attention; float64 gradient checks with masks and dropout on.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "compare.h"
#include "nn/nn.h"
#include "test_helpers.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;
using testing::check_module;
using testing::inf;
using testing::leaf64;

namespace {
Tensor bools(std::vector<bool> v, Shape s) { return Tensor::from_vector(v, s); }

void check_all_close(const Tensor& a, const Tensor& b, double tol = 1e-12) {
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == Approx(y[i]).margin(tol));
}
}  // namespace

TEST_CASE("scoring functions compute their textbook forms", "[attention]") {
  Tensor q = Tensor::from_vector<double>({1, 2, 0, 1}, {2, 2});
  Tensor k = Tensor::from_vector<double>({3, 1, -1, 2, 0, 4}, {3, 2});
  Tensor dot = dot_score(q, k);
  CHECK(dot.shape() == Shape{2, 3});
  CHECK(dot.to_vector() == std::vector<double>{5, 3, 8, 1, 2, 4});
  check_all_close(scaled_dot_score(q, k), dot / std::sqrt(2.0));

  BilinearScore bilinear(2, 2);
  bilinear.to(DType::Float64);
  Tensor W = bilinear.weight;
  double manual = 0;  // q[0]ᵀ W k[1]
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b) manual += q.at({0, a}) * W.at({a, b}) * k.at({1, b});
  CHECK(bilinear(q, k).at({0, 1}) == Approx(manual));

  AdditiveScore additive(2, 2, 3);
  additive.to(DType::Float64);
  Tensor Wq = additive.w_q->weight, Wk = additive.w_k->weight, v = additive.w_v->weight;
  double want = 0;  // vᵀ tanh(W_q q[1] + W_k k[2])
  for (int64_t h = 0; h < 3; ++h) {
    double pre = 0;
    for (int64_t a = 0; a < 2; ++a) pre += Wq.at({h, a}) * q.at({1, a}) + Wk.at({h, a}) * k.at({2, a});
    want += v.at({0, h}) * std::tanh(pre);
  }
  CHECK(additive(q, k).at({1, 2}) == Approx(want));
  CHECK(additive(Tensor::ones({4, 2, 2}, DType::Float64), Tensor::ones({4, 5, 2}, DType::Float64)).shape() ==
        Shape{4, 2, 5});
  CHECK_THROWS_WITH(dot_score(q, Tensor::ones({3, 3}, DType::Float64)),
                    Contains("dot_score: q [2, 2] and k [3, 3] differ"));
}

TEST_CASE("attention with each of the four scoring functions passes gradcheck", "[attention][gradcheck]") {
  Tensor q = leaf64({2, 3, 4}), k = leaf64({2, 5, 4}), v = leaf64({2, 5, 3});
  Tensor mask = bools({true, true, false, true, false, true, true, true, true, false, false, false, true, true, true},
                      {3, 5});  // the second query's keys: one blocked; no row fully blocked
  AdditiveScore additive(4, 4, 6);
  BilinearScore bilinear(4, 4);
  additive.to(DType::Float64);
  bilinear.to(DType::Float64);
  struct Named {
    const char* name;
    ScoreFn fn;
    const Module* params;
  };
  for (const Named& s :
       {Named{"dot", dot_score, nullptr}, Named{"scaled dot", scaled_dot_score, nullptr},
        Named{"additive", [&](const Tensor&a, const Tensor&b) { return additive(a, b); }, &additive},
        Named{"bilinear", [&](const Tensor&a, const Tensor&b) { return bilinear(a, b); }, &bilinear}}) {
    std::vector<std::pair<std::string, Tensor>> leaves{{"q", q}, {"k", k}, {"v", v}};
    if (s.params)
      for (auto& p : s.params->named_parameters()) leaves.push_back(p);
    GradcheckResult r = gradcheck_leaves([&] { return attention(q, k, v, s.fn, mask).output; }, leaves);
    INFO(s.name << "\n" << r.summary());
    CHECK(r.ok);
  }
}

TEST_CASE("attention weights are a distribution and masked keys get exactly 0", "[attention][masks]") {
  Tensor q = Tensor::randn({2, 4, 8}, DType::Float64), k = Tensor::randn({2, 6, 8}, DType::Float64),
         v = Tensor::randn({2, 6, 3}, DType::Float64);
  Tensor mask = key_padding_mask({6, 3}, 6);  // batch 1 has 3 real keys
  AttentionResult r = scaled_dot_product_attention(q, k, v, reshape(mask, {2, 1, 6}));
  for (double s : sum(r.weights, {-1}).to_vector()) CHECK(s == Approx(1).epsilon(1e-12));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 3; j < 6; ++j) CHECK(r.weights.at({1, i, j}) == 0);
  // The output is the weighted sum of values.
  check_all_close(r.output, matmul(r.weights, v));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, Tensor::ones({5, 6}, DType::Bool)),
                    Contains("attention: mask [5, 6] does not broadcast to scores [2, 4, 6]"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, Tensor::ones({2, 5, 3}, DType::Float64)),
                    Contains("attention: k [2, 6, 8] and v [2, 5, 3] must hold the same number of keys"));
}

TEST_CASE("a fully masked query row gives zero output and finite, zero gradients", "[attention][masks]") {
  Tensor q = leaf64({1, 2, 4}), k = leaf64({1, 3, 4}), v = leaf64({1, 3, 2});
  Tensor mask = bools({true, false, true, false, false, false}, {2, 3});  // query 1 sees nothing
  AttentionResult r = scaled_dot_product_attention(q, k, v, mask);
  CHECK(r.output.at({0, 1, 0}) == 0);
  CHECK(r.output.at({0, 1, 1}) == 0);
  CHECK(sum(r.weights, {-1}).at({0, 1}) == 0);
  sum(r.output * r.output).backward();
  for (const Tensor& t : {q, k, v})
    for (double g : t.grad().to_vector()) CHECK(std::isfinite(g));
  for (int64_t c = 0; c < 4; ++c) CHECK(q.grad().at({0, 1, c}) == 0);
  GradcheckResult check = gradcheck_leaves([&] { return scaled_dot_product_attention(q, k, v, mask).output; },
                                           {{"q", q}, {"k", k}, {"v", v}});
  INFO(check.summary());
  CHECK(check.ok);
}

TEST_CASE("every combination of masks blocks what either blocks", "[attention][masks]") {
  Tensor scores = Tensor::randn({2, 3, 3}, DType::Float64);
  Tensor causal = causal_mask(3, 3);
  Tensor padding = reshape(key_padding_mask({3, 2}, 3), {2, 1, 3});
  auto additive = [](const Tensor& m) {
    return masked_fill(Tensor::zeros(m.shape(), DType::Float64), logical_not(m), -inf);
  };
  Tensor bias = Tensor::randn({3, 3}, DType::Float64);  // a float mask with finite entries
  // Reference: blocked where either bool mask blocks, float masks summed.
  Tensor both = logical_and(causal, padding);
  Tensor want = softmax(add(masked_fill(scores, logical_not(both), -inf), bias), -1);

  auto weights = [&](const Tensor& mask) { return softmax(apply_mask(scores, mask), -1); };
  check_all_close(weights(merge_masks(causal, padding)), softmax(masked_fill(scores, logical_not(both), -inf), -1));
  CHECK(merge_masks(causal, padding).dtype() == DType::Bool);
  check_all_close(weights(merge_masks(merge_masks(causal, padding), bias)), want);              // bool + float
  check_all_close(weights(merge_masks(add(additive(causal), bias), additive(padding))), want);  // float + float
  check_all_close(weights(merge_masks(additive(padding), merge_masks(bias, causal))), want);    // order does not matter
  CHECK(merge_masks(Tensor(), causal).to_vector() == causal.to_vector());
  CHECK_THROWS_WITH(merge_masks(causal, Tensor::ones({3, 3}, DType::Int64)), Contains("merge_masks"));
}

TEST_CASE("dropout acts on the weights and the returned weights are the probabilities before it",
          "[attention][dropout]") {
  Tensor q = Tensor::randn({1, 4, 8}, DType::Float64), k = Tensor::randn({1, 6, 8}, DType::Float64),
         v = Tensor::randn({1, 6, 5}, DType::Float64);
  Generator gen(5);
  Generator::State start = gen.state();
  AttentionResult r = scaled_dot_product_attention(q, k, v, Tensor(), 0.5, &gen);
  for (double s : sum(r.weights, {-1}).to_vector()) CHECK(s == Approx(1));
  gen.set_state(start);
  Tensor dropped = dropout(r.weights, 0.5, true, &gen);
  check_all_close(r.output, matmul(dropped, v));
  CHECK(-max(neg(r.weights)).item() >= 0);
}

TEST_CASE("single-query attention is the textbook weighted sum", "[attention]") {
  Tensor keys = Tensor::from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor values = Tensor::from_vector<double>({10, 20, 30}, {3, 1});
  Tensor query = Tensor::from_vector<double>({2, 0});
  double e0 = std::exp(2 / std::sqrt(2.0)), e1 = 1, e2 = std::exp(2 / std::sqrt(2.0));
  CHECK(attend(query, keys, values).item() == Approx((10 * e0 + 20 * e1 + 30 * e2) / (e0 + e1 + e2)));
  CHECK(attend(query, keys, values, dot_score).item() ==
        Approx((10 * std::exp(2) + 20 + 30 * std::exp(2)) / (2 * std::exp(2) + 1)));
  CHECK_THROWS_WITH(attend(keys, keys, values), Contains("attend: query [3, 2]"));
}

TEST_CASE("hard attention picks one key per query and carries no gradient", "[attention][hard]") {
  Tensor weights = Tensor::from_vector<double>({0.1, 0.7, 0.2, 0, 0, 0, 0.5, 0.5, 0}, {1, 3, 3});
  Tensor v = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {1, 3, 2}).requires_grad_();
  HardAttentionResult hard = hard_attention(weights, v);
  CHECK(hard.indices.to_vector() == std::vector<double>{1, -1, 0});  // ties: the first; empty row: -1
  CHECK(hard.output.to_vector() == std::vector<double>{3, 4, 0, 0, 1, 2});
  CHECK_FALSE(hard.output.requires_grad());
  // Sampling follows the weights: key 1 about 70% of the time.
  Generator gen(2);
  int ones = 0;
  for (int i = 0; i < 4000; ++i) ones += hard_attention(weights, v, HardMode::Sample, &gen).indices.at({0, 0}) == 1;
  CHECK(std::abs(ones / 4000.0 - 0.7) < 0.03);
  CHECK_THROWS_WITH(hard_attention(weights, Tensor::ones({1, 4, 2}, DType::Float64)), Contains("hard_attention"));
  // No keys: every query picks none (it threw an internal reshape error).
  HardAttentionResult none = hard_attention(Tensor::zeros({2, 3, 0}), Tensor::zeros({2, 0, 4}));
  CHECK(none.indices.shape() == Shape{2, 3});
  CHECK(none.indices.to_vector() == std::vector<double>(6, -1));
  CHECK(none.output.shape() == Shape{2, 3, 4});
  CHECK(max(abs(none.output)).item() == 0);
  CHECK(hard_attention(Tensor::zeros({0, 3, 2}), Tensor::zeros({0, 2, 4})).output.shape() == Shape{0, 3, 4});
}

TEST_CASE("MultiHeadAttention: shapes, per-head weights, self and cross", "[attention][mha]") {
  MultiHeadAttention mha(8, 2);
  std::vector<std::string> names;
  for (auto& [name, t] : mha.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
                                          "v_proj.weight", "v_proj.bias", "out_proj.weight", "out_proj.bias"});
  Tensor x = Tensor::randn({3, 5, 8}), memory = Tensor::randn({3, 7, 8});
  MhaOptions opts;
  opts.need_weights = true;
  AttentionResult self = mha.forward(x, opts);
  CHECK(self.output.shape() == Shape{3, 5, 8});
  CHECK(self.weights.shape() == Shape{3, 2, 5, 5});
  AttentionResult cross = mha.forward(x, memory, opts);
  CHECK(cross.output.shape() == Shape{3, 5, 8});
  CHECK(cross.weights.shape() == Shape{3, 2, 5, 7});
  CHECK_FALSE(mha.forward(x).weights.defined());
}

TEST_CASE("MultiHeadAttention with causal + padding masks and dropout passes gradcheck",
          "[attention][mha][gradcheck]") {
  MultiHeadAttention mha(6, 2, 0.1);
  mha.to(DType::Float64);
  Tensor x = leaf64({2, 4, 6}), memory = leaf64({2, 3, 6});
  MhaOptions self_opts;
  self_opts.causal = true;
  self_opts.key_padding_mask = key_padding_mask({4, 2}, 4);
  GradcheckResult self = check_module(mha, {{"x", x}}, [&] { return mha.forward(x, self_opts).output; });
  INFO("self\n" << self.summary());
  CHECK(self.ok);
  MhaOptions cross_opts;
  cross_opts.key_padding_mask = key_padding_mask({3, 1}, 3);
  GradcheckResult cross =
      check_module(mha, {{"x", x}, {"memory", memory}}, [&] { return mha.forward(x, memory, cross_opts).output; });
  INFO("cross\n" << cross.summary());
  CHECK(cross.ok);
}

TEST_CASE("softmax attention's key bias gets its exact zero gradient, linear attention's a live one",
          "[attention][mha]") {
  // q·b_k shifts a query's whole row of scores, which softmax ignores: the
  // output does not depend on b_k, so its gradient is exactly zero, not the
  // rounding noise that Adam would turn into a random walk of b_k.
  for (bool fused : {true, false}) {
    MultiHeadAttention mha(8, 2);
    Tensor x = Tensor::randn({2, 5, 8}), memory = Tensor::randn({2, 3, 8});
    MhaOptions causal;
    causal.causal = true;
    causal.fused = fused;
    Tensor before = mha.forward(x, causal).output;
    mha.k_proj->bias.assign_(Tensor::randn({8}) * 10.0);
    Tensor after = mha.forward(x, causal).output;
    CHECK(testing::worst_difference(before, after) < 1e-5);  // the output does not depend on b_k
    sum(mha.forward(x, causal).output).backward();
    MhaOptions cross;
    cross.fused = fused;
    sum(mha.forward(x, memory, cross).output).backward();
    CHECK_FALSE(mha.k_proj->bias.grad().defined());
    CHECK(mha.k_proj->weight.grad().defined());
    CHECK(mha.q_proj->bias.grad().defined());
  }
  MultiHeadAttention mha(8, 2);
  MhaOptions linear;
  linear.kind = AttentionKind::parse("linear");
  sum(mha.forward(Tensor::randn({2, 5, 8}), linear).output).backward();
  REQUIRE(mha.k_proj->bias.grad().defined());
  CHECK(testing::worst_difference(mha.k_proj->bias.grad(), Tensor::zeros({8})) > 1e-6);
}

TEST_CASE("causal attention at position i ignores every token after i", "[attention][mha]") {
  MultiHeadAttention mha(8, 4);
  MhaOptions causal;
  causal.causal = true;
  Tensor x = Tensor::randn({1, 6, 8});
  Tensor changed = x.clone();
  for (int64_t c = 0; c < 8; ++c) changed.set({0, 4, c}, 100 + c), changed.set({0, 5, c}, -7);
  Tensor a = mha.forward(x, causal).output, b = mha.forward(changed, causal).output;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t c = 0; c < 8; ++c) CHECK(a.at({0, i, c}) == b.at({0, i, c}));
  CHECK(a.at({0, 4, 0}) != b.at({0, 4, 0}));
}

TEST_CASE("MultiHeadAttention errors name the module and the shapes", "[attention][mha][errors]") {
  CHECK_THROWS_WITH(MultiHeadAttention(10, 3),
                    Contains("MultiHeadAttention: d_model 10 is not divisible by num_heads 3"));
  MultiHeadAttention mha(8, 2);
  CHECK_THROWS_WITH(mha.forward(Tensor::ones({2, 5, 6})),
                    Contains("MultiHeadAttention(d_model=8, heads=2): query [2, 5, 6] must be [B, n, 8]"));
  CHECK_THROWS_WITH(mha.forward(Tensor::ones({2, 5, 8}), Tensor::ones({3, 4, 8})), Contains("memory [3, 4, 8]"));
  MhaOptions bad_padding;
  bad_padding.key_padding_mask = Tensor::ones({2, 4}, DType::Bool);
  CHECK_THROWS_WITH(mha.forward(Tensor::ones({2, 5, 8}), bad_padding),
                    Contains("key_padding_mask [2, 4] must be [2, 5]"));
  MhaOptions bad_mask;
  bad_mask.attn_mask = Tensor::ones({5, 4}, DType::Bool);
  CHECK_THROWS_WITH(mha.forward(Tensor::ones({2, 5, 8}), bad_mask),
                    Contains("attn_mask [5, 4] does not fit 5 queries and 5 keys"));
  MhaOptions wrong_heads;
  wrong_heads.attn_mask = Tensor::ones({2, 3, 5, 5}, DType::Bool);
  CHECK_THROWS_WITH(mha.forward(Tensor::ones({2, 5, 8}), wrong_heads),
                    Contains("MultiHeadAttention") && Contains("[2, 3, 5, 5]"));
}

TEST_CASE("MultiHeadAttention with separate key and value inputs of widths kdim and vdim", "[attention][mha]") {
  MultiHeadAttention mha(8, 2, {.kdim = 3, .vdim = 5});
  CHECK(mha.k_proj->weight.shape() == Shape{8, 3});
  CHECK(mha.v_proj->weight.shape() == Shape{8, 5});
  CHECK(mha.q_proj->weight.shape() == Shape{8, 8});
  Tensor x = Tensor::randn({2, 4, 8}), key = Tensor::randn({2, 6, 3}), value = Tensor::randn({2, 6, 5});
  MhaOptions weights;
  weights.need_weights = true;
  AttentionResult r = mha.forward(x, key, value, weights);
  CHECK(r.output.shape() == Shape{2, 4, 8});
  CHECK(r.weights.shape() == Shape{2, 2, 4, 6});
  // The fused kernel and the composed path agree; both equal the formula
  // out_proj(concat_h softmax(q_h k_hᵀ/√d_h) v_h) written out here.
  Tensor fused = mha.forward(x, key, value).output;
  CHECK(testing::worst_difference(fused, r.output) < 1e-5);
  auto heads = [](const Tensor& t, int64_t n) { return permute(reshape(t, {2, n, 2, 4}), {0, 2, 1, 3}); };
  Tensor q = heads(mha.q_proj->forward(x), 4), k = heads(mha.k_proj->forward(key), 6),
         v = heads(mha.v_proj->forward(value), 6);
  Tensor o = matmul(softmax(matmul(q, k, false, true) * 0.5, -1), v);
  Tensor expected = mha.out_proj->forward(reshape(permute(o, {0, 2, 1, 3}), {2, 4, 8}));
  CHECK(testing::worst_difference(expected, r.output) < 1e-5);
  // Two-argument cross-attention is key = value = memory.
  MultiHeadAttention same(8, 2);
  Tensor memory = Tensor::randn({2, 6, 8});
  CHECK(testing::worst_difference(same.forward(x, memory).output, same.forward(x, memory, memory).output) == 0);
  // Self-attention through three arguments matches the one-argument call.
  CHECK(testing::worst_difference(same.forward(x).output, same.forward(x, x, x).output) < 1e-6);
}

// The fused kernel takes bool padding masks only; a float one (added to the scores, as torch) was refused on the
// default path and worked only when weights were asked for.
TEST_CASE("MultiHeadAttention takes a float key_padding_mask whether or not it returns weights", "[attention][mha]") {
  Generator gen(4);
  MultiHeadAttention mha(8, 2, 0.0, true, &gen);
  mha.to(DType::Float64);
  Tensor x = Tensor::randn({2, 3, 8}, DType::Float64, &gen);
  MhaOptions o;
  o.key_padding_mask = Tensor::from_vector<double>({0, 0, -INFINITY, 0, -1.5, 0}, {2, 3});
  Tensor plain = mha.forward(x, o).output;
  o.need_weights = true;
  AttentionResult with = mha.forward(x, o);
  CHECK(testing::worst_difference(plain, with.output) < 1e-12);
  CHECK(with.weights.at({0, 0, 1, 2}) == 0);  // the -inf key
}

TEST_CASE("MultiHeadAttention's key, value and kdim/vdim errors name the shapes", "[attention][mha][errors]") {
  MultiHeadAttention mha(8, 2, {.kdim = 3, .vdim = 5});
  Tensor x = Tensor::ones({2, 4, 8});
  CHECK_THROWS_WITH(mha.forward(x), Contains("self-attention's key [2, 4, 8] must be [2, n_k, 3]"));
  CHECK_THROWS_WITH(mha.forward(x, Tensor::ones({2, 6, 3}), Tensor::ones({2, 6, 3})),
                    Contains("value [2, 6, 3] must be [2, 6, 5]"));
  CHECK_THROWS_WITH(mha.forward(x, Tensor::ones({2, 6, 3}), Tensor::ones({2, 5, 5})),
                    Contains("value [2, 5, 5] must be [2, 6, 5]"));
  CHECK_THROWS_WITH(MultiHeadAttention(8, 2, {.kdim = -1}), Contains("kdim -1"));
  CHECK_THROWS_WITH(mha.forward_cached(x, Tensor::zeros({2, 8, 2, 4}), Tensor::zeros({2, 8, 2, 4}), 0, {}),
                    Contains("kdim and vdim equal to d_model"));
}

TEST_CASE("MultiHeadAttention(query, key, value) with kdim/vdim, masks and dropout passes gradcheck",
          "[attention][mha][gradcheck]") {
  MultiHeadAttention mha(6, 2, {.dropout = 0.2, .kdim = 4, .vdim = 5});
  mha.to(DType::Float64);
  Tensor x = leaf64({2, 3, 6}), key = leaf64({2, 4, 4}), value = leaf64({2, 4, 5});
  Tensor float_mask = leaf64({3, 4});  // a learned additive bias: its gradient is checked too
  MhaOptions masked;
  masked.key_padding_mask = key_padding_mask({4, 2}, 4);
  masked.attn_mask = bools({1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0}, {3, 4});
  masked.need_weights = true;
  GradcheckResult bool_masks = check_module(mha, {{"x", x}, {"key", key}, {"value", value}},
                                            [&] { return mha.forward(x, key, value, masked).output; });
  INFO("bool masks\n" << bool_masks.summary());
  CHECK(bool_masks.ok);
  MhaOptions float_masked;
  float_masked.attn_mask = float_mask;
  float_masked.key_padding_mask = key_padding_mask({3, 4}, 4);
  GradcheckResult with_float = check_module(mha, {{"x", x}, {"key", key}, {"value", value}, {"float_mask", float_mask}},
                                            [&] { return mha.forward(x, key, value, float_masked).output; });
  INFO("float mask\n" << with_float.summary());
  CHECK(with_float.ok);
}

TEST_CASE("SingleHeadAttention: d_k and d_v differ, the formula, masks", "[attention][single_head]") {
  SingleHeadAttention head(4, 5, 3);
  std::vector<std::string> names;
  for (auto& [name, t] : head.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj.weight", "k_proj.weight", "v_proj.weight"});
  CHECK(head.q_proj->weight.shape() == Shape{5, 4});
  CHECK(head.v_proj->weight.shape() == Shape{3, 4});
  Tensor x = Tensor::randn({3, 2, 4}, DType::Float64);
  head.to(DType::Float64);
  AttentionResult r = head.forward(x);
  CHECK(r.output.shape() == Shape{3, 2, 3});
  CHECK(r.weights.shape() == Shape{3, 2, 2});
  Tensor q = matmul(x, head.q_proj->weight, false, true), k = matmul(x, head.k_proj->weight, false, true),
         v = matmul(x, head.v_proj->weight, false, true);
  Tensor expected = matmul(softmax(matmul(q, k, false, true) / std::sqrt(5.0), -1), v);
  CHECK(testing::worst_difference(expected, r.output) < 1e-14);
  // A padding mask [B, 1, n_k] (true = real token) zeroes the padded keys' weights.
  Tensor pad = reshape(key_padding_mask({2, 1, 2}, 2), {3, 1, 2});
  AttentionResult masked = head.forward(x, pad);
  CHECK(masked.weights.at({1, 0, 1}) == 0);
  CHECK(masked.weights.at({1, 1, 0}) == 1);
  // Cross: keys and values from other tensors of other widths.
  SingleHeadAttention cross(4, 2, 6, {.bias = true, .kdim = 3, .vdim = 7});
  AttentionResult c = cross.forward(Tensor::randn({2, 5, 4}), Tensor::randn({2, 3, 3}), Tensor::randn({2, 3, 7}));
  CHECK(c.output.shape() == Shape{2, 5, 6});
  CHECK(c.weights.shape() == Shape{2, 5, 3});
}

TEST_CASE("SingleHeadAttention errors name the module and the shapes", "[attention][single_head][errors]") {
  CHECK_THROWS_WITH(SingleHeadAttention(4, 0, 3), Contains("SingleHeadAttention: widths d_in 4, d_k 0"));
  CHECK_THROWS_WITH(SingleHeadAttention(4, 2, 3, {.dropout = 2}), Contains("dropout must be in [0, 1]"));
  SingleHeadAttention head(4, 5, 3, {.kdim = 2});
  CHECK_THROWS_WITH(head.forward(Tensor::ones({3, 2, 5})),
                    Contains("SingleHeadAttention(d_in=4, d_k=5, d_v=3): query [3, 2, 5] must be [..., n_q, 4]"));
  CHECK_THROWS_WITH(head.forward(Tensor::ones({3, 2, 4})), Contains("key [3, 2, 4] must be [..., n_k, 2]"));
  CHECK_THROWS_WITH(head.forward(Tensor::ones({3, 2, 4}), Tensor::ones({3, 6, 2}), Tensor::ones({3, 5, 4})),
                    Contains("value [3, 5, 4] must be [..., 6, 4]"));
  CHECK_THROWS_WITH(head.forward(Tensor::ones({3, 2, 4}), Tensor::ones({3, 6, 2}), Tensor::ones({3, 6, 4}),
                                 Tensor::ones({3, 5}, DType::Bool)),
                    Contains("SingleHeadAttention"));
}

TEST_CASE("SingleHeadAttention with a padding mask, bias and dropout passes gradcheck",
          "[attention][single_head][gradcheck]") {
  SingleHeadAttention head(3, 4, 2, {.bias = true, .dropout = 0.25, .kdim = 5, .vdim = 6});
  head.to(DType::Float64);
  Tensor query = leaf64({2, 3, 3}), key = leaf64({2, 4, 5}), value = leaf64({2, 4, 6});
  Tensor pad = reshape(key_padding_mask({4, 2}, 4), {2, 1, 4});
  GradcheckResult r = check_module(head, {{"query", query}, {"key", key}, {"value", value}},
                                   [&] { return head.forward(query, key, value, pad).output; });
  INFO(r.summary());
  CHECK(r.ok);
  CHECK_FALSE(head.k_proj->bias.grad().defined());  // the key bias: its exact zero gradient
}

// qkv explore's numbers: dL/dP from the engine's backward (a retained
// gradient) against central differences of the loss with P edited, and Σ P ⊙
// dL/dP against a gate on each head's output made without the edit: scaling
// the head's input columns of out_proj.weight by ξ scales exactly its output.
TEST_CASE("dL/dP and each head's gate gradient equal central differences", "[attention][gradcheck]") {
  Generator gen(7);
  MultiHeadAttention mha(8, 2, 0.0, true, &gen);
  mha.to(DType::Float64);
  Tensor x = Tensor::randn({1, 5, 8}, DType::Float64, &gen), r = Tensor::randn({1, 5, 8}, DType::Float64, &gen);
  MhaOptions opts;
  opts.causal = true;
  opts.need_weights = true;
  auto loss = [&] { return sum(mul(mha.forward(x, opts).output, r)); };
  AttentionResult res = mha.forward(x, opts);
  res.weights.retain_grad();
  sum(mul(res.output, r)).backward();
  const Tensor p = res.weights, g = p.grad();
  REQUIRE(g.defined());
  const double h = 1e-6;
  std::vector<double> grad = g.to_vector();
  for (int64_t i = 0; i < p.numel(); ++i) {  // every entry, the masked ones included (P is 0 there, dL/dP is not)
    auto at = [&](double by) {
      AttentionWeightsEdit edit([&](int64_t call, const Tensor& w) {
        REQUIRE(call == 0);
        std::vector<double> e(w.numel(), 0.0);
        e[i] = by;
        return add(w, Tensor::from_vector(e, w.shape()));
      });
      return loss().item();
    };
    CHECK(grad[i] == Approx((at(h) - at(-h)) / (2 * h)).margin(1e-7));
  }
  std::vector<double> gate = head_gate_gradient(p, g);
  REQUIRE(gate.size() == 2);
  for (int64_t head = 0; head < 2; ++head) {
    auto scaled = [&](double xi) {
      Tensor saved = mha.out_proj->weight.detach().clone();
      std::vector<double> w = saved.to_vector();
      for (int64_t row = 0; row < 8; ++row)
        for (int64_t c = head * 4; c < head * 4 + 4; ++c) w[row * 8 + c] *= xi;
      mha.out_proj->weight.assign_(Tensor::from_vector(w, {8, 8}));
      double l = loss().item();
      mha.out_proj->weight.assign_(saved);
      return l;
    };
    CHECK(gate[head] == Approx((scaled(1 + h) - scaled(1 - h)) / (2 * h)).margin(1e-7));
    CHECK(std::fabs(gate[head]) > 1e-6);  // a head that matters: the check is not 0 = 0
  }
  CHECK_THROWS_WITH(head_gate_gradient(p, Tensor::zeros({2, 5, 5}, DType::Float64)),
                    Contains("must be [..., heads, n_q, n_k] alike"));
  AttentionWeightsEdit outer([](int64_t, const Tensor& w) { return w; });
  CHECK_THROWS_WITH(AttentionWeightsEdit([](int64_t, const Tensor& w) { return w; }), Contains("do not nest"));
}
