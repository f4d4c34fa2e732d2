// Module plumbing and the basic layers: values, PyTorch semantics, float64
// module-level gradient checks, and errors naming the module and shapes.
#include <catch2/catch.hpp>

#include <cmath>

#include "nn/nn.h"
#include "optim/optim.h"
#include "test_helpers.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;
using testing::check_module;
using testing::leaf64;

namespace {
class Pair : public Module {
 public:
  Pair() {
    first = register_module("first", std::make_shared<Linear>(3, 2));
    drop = register_module("drop", std::make_shared<Dropout>(0.5));
    scale = register_parameter("scale", Tensor::ones({2}));
  }
  std::shared_ptr<Linear> first;
  std::shared_ptr<Dropout> drop;
  Tensor scale;
};

std::vector<std::string> parameter_names(const Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.named_parameters()) names.push_back(name);
  return names;
}
}  // namespace

TEST_CASE("modules name parameters with dots and propagate train/eval", "[module]") {
  Pair m;
  CHECK(parameter_names(m) == std::vector<std::string>{"scale", "first.weight", "first.bias"});
  CHECK(m.num_parameters() == 2 + 6 + 2);
  CHECK(m.parameters().size() == 3);
  CHECK(m.drop->is_training());
  m.eval();
  CHECK_FALSE(m.drop->is_training());
  m.train();
  CHECK(m.first->is_training());
  for (const Tensor& p : m.parameters()) CHECK(p.requires_grad());
}

namespace {
// A child and a parameter registered in two places (weight sharing done by registering twice).
class Shared : public Module {
 public:
  Shared() {
    auto lin = std::make_shared<Linear>(2, 2);
    a = register_module("a", lin);
    b = register_module("b", lin);
    w = register_parameter("w", Tensor::ones({2}));
    v = register_parameter("v", w);
  }
  std::shared_ptr<Linear> a, b;
  Tensor w, v;
  // Each misuse, for the errors below.
  void twice() { register_module("a", std::make_shared<Linear>(1, 1)); }
  void clash() { register_parameter("a", Tensor::ones({1})); }
  void computed() { register_parameter("x", Tensor::ones({2}).requires_grad_() * 2.0); }
  void integer() { register_parameter("y", Tensor::zeros({2}, DType::Int64)); }
};
}  // namespace

TEST_CASE("a tensor or module registered in two places is one parameter, named where it was first", "[module]") {
  // torch's named_parameters() lists it once; listed twice, an SGD step moved it twice (1 -> -1, not 0).
  Shared m;
  CHECK(parameter_names(m) == std::vector<std::string>{"w", "a.weight", "a.bias"});
  CHECK(m.num_parameters() == 2 + 4 + 2);
  CHECK(m.b->path() == "a");
  optim::SGD opt(m.named_parameters(), {0.5});
  sum(m.w * 2.0).backward();
  opt.step();
  CHECK(m.v.to_vector() == std::vector<double>{0, 0});
  CHECK_THROWS_WITH(m.twice(), Contains("register_module: 'a' is already a sub-module of this module"));
  CHECK_THROWS_WITH(m.clash(), Contains("register_parameter: 'a' is already a sub-module"));
  CHECK_THROWS_WITH(m.computed(), Contains("register_parameter: 'x' must be a float leaf tensor, got the result of "
                                           "mul_scalar (pass it .detach())"));
  CHECK_THROWS_WITH(m.integer(), Contains("'y' must be a float leaf tensor, got a int64 one"));
}

TEST_CASE("Module::to converts every parameter in place and zero_grad clears them", "[module]") {
  Pair m;
  Tensor weight = m.first->weight;  // a handle taken before the conversion
  std::vector<double> before = weight.to_vector();
  m.to(DType::Float64);
  CHECK(m.dtype() == DType::Float64);
  CHECK(weight.dtype() == DType::Float64);
  CHECK(m.first->weight.dtype() == DType::Float64);
  for (size_t i = 0; i < before.size(); ++i) CHECK(weight.to_vector()[i] == before[i]);
  sum(m.first->forward(Tensor::ones({1, 3}, DType::Float64))).backward();
  CHECK(m.first->weight.grad().defined());
  m.zero_grad();
  CHECK_FALSE(m.first->weight.grad().defined());
  CHECK_THROWS_WITH(m.to(DType::Int64), Contains("float32 or float64"));
}

TEST_CASE("Linear computes x·Wᵀ + b with weight [out, in]", "[layers]") {
  Linear lin(3, 2);
  CHECK(lin.weight.shape() == Shape{2, 3});
  CHECK(lin.bias.shape() == Shape{2});
  Tensor x = Tensor::from_vector<float>({1, 2, 3, -1, 0, 1}, {2, 3});
  Tensor y = lin(x);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t o = 0; o < 2; ++o) {
      double want = lin.bias.at({o});
      for (int64_t k = 0; k < 3; ++k) want += x.at({i, k}) * lin.weight.at({o, k});
      CHECK(y.at({i, o}) == Approx(want).epsilon(1e-6));
    }
  CHECK(lin(Tensor::ones({4, 5, 3})).shape() == Shape{4, 5, 2});
  CHECK(lin(Tensor::ones({3})).shape() == Shape{2});
  CHECK_FALSE(Linear(3, 2, false).bias.defined());
  CHECK_THROWS_WITH(lin(Tensor::ones({2, 4})), Contains("Linear(3 -> 2): input [2, 4] does not end in 3 features"));
  CHECK_THROWS_WITH(Linear(0, 2), Contains("Linear: sizes must be positive"));
}

TEST_CASE("Linear initialisations stay within their bounds and are seeded", "[layers]") {
  Generator a(1), b(1);
  CHECK(Linear(64, 32, true, Init::XavierUniform, &a).weight.to_vector() ==
        Linear(64, 32, true, Init::XavierUniform, &b).weight.to_vector());
  struct Bound {
    Init init;
    double bound;
  };
  for (Bound c : {Bound{Init::Torch, 1 / 8.0}, Bound{Init::XavierUniform, std::sqrt(6.0 / 96)},
                  Bound{Init::KaimingUniform, std::sqrt(6.0 / 64)}}) {
    Linear lin(64, 32, true, c.init);
    double top = max(abs(lin.weight)).item();
    CHECK(top <= c.bound);
    CHECK(top > 0.9 * c.bound);  // uniform over the whole range, not a narrower one
  }
  Linear gpt(64, 32, true, Init::Normal002);
  CHECK(std::sqrt(var(gpt.weight).item()) == Approx(0.02).epsilon(0.1));
  CHECK(max(abs(gpt.bias)).item() == 0);
}

TEST_CASE("Embedding looks rows up for ids of any shape", "[layers]") {
  Embedding emb(5, 3);
  Tensor ids = Tensor::from_vector<int64_t>({4, 0, 4, 2}, {2, 2});
  Tensor out = emb(ids);
  CHECK(out.shape() == Shape{2, 2, 3});
  for (int64_t c = 0; c < 3; ++c) CHECK(out.at({1, 0, c}) == emb.weight.at({4, c}));
  CHECK_THROWS_WITH(emb(Tensor::from_vector<int64_t>({5})), Contains("Embedding(5, 3): id 5 out of range [0, 5)"));
  CHECK_THROWS_WITH(emb(Tensor::ones({2})), Contains("ids must be int64"));
}

TEST_CASE("Embedding::range gives forward(arange)'s values and gradients, and checks its ids", "[layers]") {
  Embedding emb(7, 3);
  emb.to(DType::Float64);
  Tensor g = Tensor::randn({4, 3}, DType::Float64);
  Tensor by_index = emb(Tensor::arange(2, 6, 1, DType::Int64));
  sum(by_index * g).backward();
  Tensor index_grad = emb.weight.grad().clone();
  emb.weight.zero_grad();
  Tensor by_range = emb.range(2, 4);
  sum(by_range * g).backward();
  CHECK(by_range.shape() == Shape{4, 3});
  CHECK(max(abs(by_range - by_index)).item() == 0);
  CHECK(max(abs(emb.weight.grad() - index_grad)).item() == 0);
  CHECK(emb.range(7, 0).shape() == Shape{0, 3});
  GradcheckResult r = check_module(emb, {}, [&] { return emb.range(1, 5); });
  INFO(r.summary());
  CHECK(r.ok);
  CHECK_THROWS_WITH(emb.range(5, 3), Contains("Embedding(7, 3): ids 5 .. 7 out of range [0, 7)"));
  CHECK_THROWS_WITH(emb.range(-1, 2), Contains("Embedding(7, 3): ids -1 .. 0 out of range [0, 7)"));
}

TEST_CASE("LayerNorm normalises the last dim like torch (biased variance, eps 1e-5)", "[layers]") {
  LayerNorm ln(4);
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, -1, -1, 1, 1}, {2, 4});
  Tensor y = ln(x);
  // row 0: mean 2.5, var 1.25 -> (x - 2.5)/sqrt(1.25 + 1e-5)
  CHECK(y.at({0, 0}) == Approx(-1.5 / std::sqrt(1.25 + 1e-5)).epsilon(1e-6));
  CHECK(y.at({1, 3}) == Approx(1 / std::sqrt(1 + 1e-5)).epsilon(1e-6));
  for (double m : mean(y, {1}).to_vector()) CHECK(std::abs(m) < 1e-6);
  CHECK_FALSE(LayerNorm(4, 1e-5, false).weight.defined());
  CHECK_THROWS_WITH(ln(Tensor::ones({2, 3})), Contains("LayerNorm(4): input [2, 3] does not end in 4"));
  CHECK_THROWS_WITH(layer_norm(Tensor::ones({2, 3}), Tensor::ones({4}), Tensor()),
                    Contains("layer_norm: weight/bias [4]"));
}

TEST_CASE("LayerNorm's float32 backward, in blocks of rows, matches the float64 reference at any thread count",
          "[layers][threads]") {
  // 111 rows: three blocks of 32 and a part; 45 columns: vectors and a tail.
  // Weight and bias each with and without a gradient, or absent.
  Generator gen(7);
  Tensor x64 = Tensor::randn({3, 37, 45}, DType::Float64, &gen) * 2.0 + 0.5;
  Tensor g64 = Tensor::randn({3, 37, 45}, DType::Float64, &gen);
  Tensor w64 = Tensor::randn({45}, DType::Float64, &gen), b64 = Tensor::randn({45}, DType::Float64, &gen);
  auto grads = [&](DType dtype, bool want_w, bool want_b, bool affine) {
    Tensor x = x64.to(dtype).detach().requires_grad_(true);
    Tensor w = affine ? w64.to(dtype).detach().requires_grad_(want_w) : Tensor();
    Tensor b = affine ? b64.to(dtype).detach().requires_grad_(want_b) : Tensor();
    sum(layer_norm(x, w, b, 1e-5) * g64.to(dtype)).backward();
    std::vector<std::vector<double>> out{x.grad().to_vector()};
    for (const Tensor& p : {w, b})
      out.push_back(p.defined() && p.grad().defined() ? p.grad().to_vector() : std::vector<double>{});
    return out;
  };
  for (auto [want_w, want_b, affine] :
       {std::tuple{true, true, true}, std::tuple{true, false, true}, std::tuple{false, true, true},
        std::tuple{false, false, true}, std::tuple{false, false, false}}) {
    CAPTURE(want_w, want_b, affine);
    auto reference = grads(DType::Float64, want_w, want_b, affine);
    set_num_threads(1);
    auto one = grads(DType::Float32, want_w, want_b, affine);
    for (int threads : {2, 3}) {
      set_num_threads(threads);
      bool same_bits = grads(DType::Float32, want_w, want_b, affine) == one;  // (Catch would print every value)
      CHECK(same_bits);
    }
    set_num_threads(0);
    for (size_t k = 0; k < reference.size(); ++k) {
      REQUIRE(one[k].size() == reference[k].size());
      CHECK(one[k].size() == (k == 0 ? 111u * 45u : (k == 1 ? want_w : want_b) ? 45u : 0u));
      for (size_t i = 0; i < reference[k].size(); ++i)  // sums of 111 terms of order 1: float32 rounding
        REQUIRE(one[k][i] == Approx(reference[k][i]).margin(2e-5 * (k == 0 ? 1 : 111)));
    }
  }
}

TEST_CASE("dropout is inverted, keeps the expectation, and is the identity in eval", "[layers][dropout]") {
  Tensor x = Tensor::ones({1000, 100}, DType::Float64);
  Generator gen(3);
  Tensor y = dropout(x, 0.3, true, &gen);
  std::vector<double> v = y.to_vector();
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0)
      ++zeros;
    else
      CHECK(e == Approx(1 / 0.7));
  }
  CHECK(std::abs(zeros / 100000.0 - 0.3) < 0.01);
  CHECK(std::abs(mean(y).item() - 1.0) < 0.01);  // the mean over many draws keeps the input's
  CHECK(dropout(x, 0.3, false).to_vector() == x.to_vector());
  CHECK(dropout(x, 0.0).to_vector() == x.to_vector());
  CHECK(max(abs(dropout(x, 1.0))).item() == 0);
  Dropout module(0.5);
  module.eval();
  CHECK(module(x).to_vector() == x.to_vector());
  // The same generator state replays the same mask.
  Generator g1(9), g2(9);
  CHECK(dropout(x, 0.5, true, &g1).to_vector() == dropout(x, 0.5, true, &g2).to_vector());
  CHECK_THROWS_WITH(dropout(x, 1.5), Contains("dropout: p must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(Dropout(-0.1), Contains("Dropout: p must be in [0, 1]"));
}

TEST_CASE("activations match their definitions", "[layers]") {
  Tensor x = Tensor::from_vector<double>({-1, 0, 1, 2});
  std::vector<double> g = GELU()(x).to_vector(), gt = GELU(true)(x).to_vector();
  CHECK(g[2] == Approx(0.8413447460685429));  // x·Φ(x) at 1
  CHECK(g[0] == Approx(-0.15865525393145707));
  CHECK(gt[2] == Approx(0.8411919906082768));  // the tanh form at 1
  CHECK(gt[3] == Approx(1.9545976940871754));
  CHECK(ReLU()(x).to_vector() == std::vector<double>{0, 0, 1, 2});
  CHECK(Tanh()(x).at({3}) == Approx(std::tanh(2.0)));
}

TEST_CASE("cross_entropy matches -log softmax at the target, with ignore_index", "[layers][loss]") {
  Tensor logits = Tensor::from_vector<double>({1, 2, 3, 0, 0, 0, 5, 1, 1}, {3, 3});
  Tensor targets = Tensor::from_vector<int64_t>({2, 1, -100});
  double l0 = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0))), l1 = std::log(3.0);
  CHECK(cross_entropy(logits, targets).item() == Approx((l0 + l1) / 2));
  CHECK(cross_entropy(logits, targets, -100, Reduction::Sum).item() == Approx(l0 + l1));
  Tensor all_ignored = Tensor::from_vector<int64_t>({-100, -100, -100});
  Tensor w = logits.detach().requires_grad_();
  Tensor none = cross_entropy(w, all_ignored);
  CHECK(none.item() == 0);  // not NaN
  none.backward();
  CHECK(max(abs(w.grad())).item() == 0);
  Tensor big = Tensor::from_vector<float>({1000, -1000}, {1, 2});
  CHECK(cross_entropy(big, Tensor::from_vector<int64_t>({1})).item() == Approx(2000));
  CHECK_THROWS_WITH(cross_entropy(logits, Tensor::from_vector<int64_t>({2, 3, 0})),
                    Contains("cross_entropy: target 3 at position 1 out of range for 3 classes"));
  CHECK_THROWS_WITH(cross_entropy(logits, Tensor::from_vector<int64_t>({0, 1})),
                    Contains("cross_entropy: targets [2] do not match logits [3, 3]"));
  CHECK_THROWS_WITH(cross_entropy(logits, Tensor::ones({3})), Contains("targets must be int64"));
}

TEST_CASE("float32 cross_entropy's gradient keeps float precision at large logits", "[layers][loss]") {
  // Each gradient entry is s·softmax (less s at the target), s = 1/rows: an error
  // of a few float ulps of s is what float32 can give. Rows centred at 1e4 and 30
  // spread over 8 nats, with 300 classes as in the text models.
  Generator gen(11);
  for (double centre : {1e4, 30.0, 0.0}) {
    Tensor x32 = (Tensor::randn({6, 300}, DType::Float64, &gen) * 2.0 + centre).to(DType::Float32).requires_grad_();
    Tensor x64 = x32.detach().to(DType::Float64).requires_grad_();  // the same values, exactly
    Tensor t = Tensor::from_vector<int64_t>({0, 7, 299, 150, 3, 42});
    cross_entropy(x32, t).backward();
    cross_entropy(x64, t).backward();
    double worst = max(abs(sub(x32.grad().to(DType::Float64), x64.grad()))).item() * 6;  // in units of s
    INFO("logits around " << centre << ": worst error " << worst << " of s");
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("layers pass float64 module-level gradient checks", "[layers][gradcheck]") {
  Linear lin(4, 3);
  lin.to(DType::Float64);
  Tensor x = leaf64({2, 5, 4});
  GradcheckResult r = check_module(lin, {{"x", x}}, [&] { return lin(x); });
  INFO(r.summary());
  CHECK(r.ok);

  Embedding emb(6, 3);
  emb.to(DType::Float64);
  Tensor ids = Tensor::from_vector<int64_t>({1, 5, 1, 0}, {2, 2});
  r = check_module(emb, {}, [&] { return emb(ids); });
  INFO(r.summary());
  CHECK(r.ok);

  LayerNorm ln(5);
  ln.to(DType::Float64);
  ln.weight.assign_(Tensor::randn({5}, DType::Float64));  // away from the trivial 1s and 0s
  ln.bias.assign_(Tensor::randn({5}, DType::Float64));
  Tensor h = leaf64({3, 5});
  r = check_module(ln, {{"x", h}}, [&] { return ln(h); });
  INFO(r.summary());
  CHECK(r.ok);

  Dropout drop(0.25);
  Tensor d = leaf64({4, 4});
  r = check_module(drop, {{"x", d}}, [&] { return GELU(true)(drop(d)); });
  INFO(r.summary());
  CHECK(r.ok);
}
