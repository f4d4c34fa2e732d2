// The fused head and loss (nn::linear_cross_entropy) against the composed
// ops it replaces: cross_entropy(matmul(x, weight, false, true), targets).
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;

namespace {

struct Run {
  std::vector<double> loss, gx, gw;
};

// The loss and both gradients, after backward of loss · by.
template <class Fn> Run run(const Tensor& x0, const Tensor& w0, Fn&& loss_of, double by = 1.0) {
  Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
  Tensor loss = loss_of(x, w);
  (loss * by).backward();
  return {loss.to(DType::Float64).to_vector(), x.grad().to(DType::Float64).to_vector(),
          w.grad().to(DType::Float64).to_vector()};
}

double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double scale = 0, worst = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst / std::max(scale, 1e-300);
}

struct Problem {
  Tensor x, w, t;
};

// x [2, 7, 16], weight [300, 16] (float32 unless asked), one target ignored.
Problem problem(DType dtype = DType::Float32) {
  Generator gen(3);
  Problem p{(Tensor::randn({2, 7, 16}, DType::Float32, &gen) * 2.0).to(dtype),
            Tensor::randn({300, 16}, DType::Float32, &gen).to(dtype), Tensor::randint(0, 300, {2, 7}, &gen)};
  p.t.data<int64_t>()[4] = -100;
  return p;
}

Tensor composed(const Tensor& x, const Tensor& w, const Tensor& t, Reduction r = Reduction::Mean) {
  return cross_entropy(matmul(x, w, false, true), t, -100, r);
}

}  // namespace

TEST_CASE("linear_cross_entropy in one block is the composed head and loss to the bit", "[layers][loss]") {
  Problem p = problem();
  for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
    Run fused =
        run(p.x, p.w, [&](const Tensor& x, const Tensor& w) { return linear_cross_entropy(x, w, p.t, -100, r); });
    Run ref = run(p.x, p.w, [&](const Tensor& x, const Tensor& w) { return composed(x, w, p.t, r); });
    CHECK(fused.loss == ref.loss);
    CHECK(fused.gx == ref.gx);
    CHECK(fused.gw == ref.gw);
  }
}

TEST_CASE("linear_cross_entropy in blocks matches the composed ops, the same bits at 1 and 2 threads",
          "[layers][loss][threads]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Problem p = problem(dtype);
    // 4 rows of 300 logits a block at most: blocks of 4, 4, 3, 3 rows; the ignored row in the second
    auto blocked = [&](const Tensor& x, const Tensor& w) {
      return linear_cross_entropy(x, w, p.t, -100, Reduction::Mean, 4 * 300);
    };
    Run ref = run(p.x, p.w, [&](const Tensor& x, const Tensor& w) { return composed(x, w, p.t); });
    set_num_threads(1);
    Run one = run(p.x, p.w, blocked);
    set_num_threads(2);
    Run two = run(p.x, p.w, blocked);
    set_num_threads(0);
    const double tolerance = dtype == DType::Float32 ? 2e-6 : 1e-14;
    INFO(dtype_name(dtype));
    CHECK(worst_relative(one.loss, ref.loss) < tolerance);
    CHECK(worst_relative(one.gx, ref.gx) < tolerance);
    CHECK(worst_relative(one.gw, ref.gw) < tolerance);
    CHECK(one.loss == two.loss);
    CHECK(one.gx == two.gx);
    CHECK(one.gw == two.gw);
  }
}

TEST_CASE("linear_cross_entropy scales its gradients by the output's, and counts no ignored row", "[layers][loss]") {
  Problem p = problem(DType::Float64);
  auto fused = [&](const Tensor& x, const Tensor& w) { return linear_cross_entropy(x, w, p.t); };
  auto ref = [&](const Tensor& x, const Tensor& w) { return composed(x, w, p.t); };
  Run a = run(p.x, p.w, fused, -2.5), b = run(p.x, p.w, ref, -2.5);
  CHECK(worst_relative(a.gx, b.gx) < 1e-14);
  CHECK(worst_relative(a.gw, b.gw) < 1e-14);
  // The ignored position's input gets no gradient.
  for (int64_t c = 0; c < 16; ++c) CHECK(a.gx[4 * 16 + c] == 0.0);

  Tensor none = Tensor::full({2, 7}, -100, DType::Int64);
  Run empty = run(p.x, p.w, [&](const Tensor& x, const Tensor& w) { return linear_cross_entropy(x, w, none); });
  CHECK(empty.loss[0] == 0.0);
  for (double g : empty.gw) CHECK(g == 0.0);
}

TEST_CASE("linear_cross_entropy refuses what does not fit, in one line", "[layers][loss]") {
  Problem p = problem();
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, Tensor::zeros({300, 15}), p.t),
                    Contains("linear_cross_entropy: input [2, 7, 16] and weight [300, 15] do not fit"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, Tensor::zeros({300}), p.t), Contains("do not fit"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, Tensor::zeros({2, 6}, DType::Int64)),
                    Contains("linear_cross_entropy: targets [2, 6] do not match input [2, 7, 16] (expected [2, 7])"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, Tensor::zeros({2, 7})), Contains("targets must be int64"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w.to(DType::Float64), p.t),
                    Contains("input and weight must be one float dtype, got float32 and float64"));
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, p.t, -100, Reduction::Mean, 0),
                    Contains("max_logits must be positive"));
  Tensor bad = p.t.clone();
  bad.data<int64_t>()[3] = 300;
  CHECK_THROWS_WITH(linear_cross_entropy(p.x, p.w, bad),
                    Contains("linear_cross_entropy: target 300 at position 3 out of range for 300 classes"));
}

TEST_CASE("GPT::loss is cross_entropy of GPT::forward to the bit", "[layers][loss][models]") {
  GPTConfig c;
  c.vocab = 50, c.context = 8, c.width = 16, c.heads = 2, c.layers = 2;
  Generator gen(7);
  GPT gpt(c, &gen);
  Tensor ids = Tensor::randint(0, 50, {3, 8}, &gen), targets = Tensor::randint(0, 50, {3, 8}, &gen);
  auto grads = [&] {
    std::vector<double> all;
    for (const Tensor& p : gpt.parameters()) {
      if (!p.grad().defined()) continue;  // the keys' bias: softmax does not see it
      std::vector<double> g = p.grad().to(DType::Float64).to_vector();
      all.insert(all.end(), g.begin(), g.end());
    }
    gpt.zero_grad();
    return all;
  };
  Tensor fused = gpt.loss(ids, targets);
  fused.backward();
  std::vector<double> fused_grads = grads();
  Tensor ref = cross_entropy(gpt.forward(ids), targets);
  ref.backward();
  CHECK(fused.item() == ref.item());
  CHECK(fused_grads == grads());
}
