// Softmax and log-softmax: normalisation, stability, masked rows, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "test_helpers.h"

using namespace qkv;
using Catch::Matchers::Contains;
using testing::inf;

TEST_CASE("softmax rows sum to one along any dim", "[softmax]") {
  Tensor x = Tensor::randn({3, 4, 5}, DType::Float64);
  for (int64_t dim : {0, 1, 2}) {
    Tensor s = sum(softmax(x, dim), {dim});
    for (double v : s.to_vector()) CHECK(v == Approx(1).epsilon(1e-12));
  }
  Tensor p = softmax(Tensor::from_vector<double>({1, 2, 3}), 0);
  double z = std::exp(1) + std::exp(2) + std::exp(3);
  CHECK(p.at({2}) == Approx(std::exp(3) / z));
}

TEST_CASE("softmax is stable for large inputs and log_softmax is log(softmax)", "[softmax]") {
  Tensor big = Tensor::from_vector<float>({1000, 1001, 1002});
  std::vector<double> p = softmax(big, 0).to_vector();
  for (double v : p) CHECK(std::isfinite(v));
  CHECK(p[2] == Approx(1 / (1 + std::exp(-1.0) + std::exp(-2.0))).epsilon(1e-6));
  Tensor x = Tensor::randn({4, 6}, DType::Float64);
  std::vector<double> a = log_softmax(x, -1).to_vector(), b = log(softmax(x, -1)).to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12));
  for (double v : log_softmax(Tensor::from_vector<float>({-1000, 1000}), 0).to_vector()) CHECK(std::isfinite(v));
}

// Subtracting the max first keeps float32 log-probabilities exact to their own scale: x − (max + log Σ) rounded
// max + log Σ at 1e4 (ULP 1e-3) and gave −0.3134766 for the exact −0.3132617 (PyTorch: −0.31326166).
TEST_CASE("float32 log_softmax of large logits keeps the precision of small ones", "[softmax]") {
  const double first = -std::log1p(std::exp(-1.0));  // log_softmax([1, 0])[0]
  for (float offset : {0.0f, 1e4f, -3e5f}) {
    INFO("logits offset by " << offset);
    std::vector<double> y = log_softmax(Tensor::from_vector<float>({offset + 1, offset}), 0).to_vector();
    CHECK(y[0] == Approx(first).epsilon(1e-6));
    CHECK(y[1] == Approx(first - 1).epsilon(1e-6));
  }
}

TEST_CASE("masked (-inf) entries get weight exactly 0 and a fully masked row gives zeros, not NaN", "[softmax]") {
  Tensor x = Tensor::from_vector<double>({1, -inf, 2, -inf, -inf, -inf}, {2, 3}).requires_grad_();
  Tensor p = softmax(x, -1);
  CHECK(p.at({0, 1}) == 0);
  CHECK(p.at({0, 0}) + p.at({0, 2}) == Approx(1));
  CHECK(p.to_vector()[3] == 0);
  CHECK(p.to_vector()[5] == 0);
  sum(p * Tensor::randn({2, 3}, DType::Float64)).backward();
  for (double g : x.grad().to_vector()) CHECK(std::isfinite(g));
  CHECK(x.grad().at({1, 0}) == 0);
}

TEST_CASE("softmax errors name the op", "[softmax][errors]") {
  CHECK_THROWS_WITH(softmax(Tensor::ones({2, 3}), 2), Contains("softmax: dim 2 out of range [-2, 1]"));
  CHECK_THROWS_WITH(log_softmax(Tensor::zeros({2}, DType::Int64), 0), Contains("log_softmax") && Contains("int64"));
}

TEST_CASE("NaN propagates through softmax instead of looking masked", "[softmax]") {
  Tensor x = Tensor::from_vector<double>({std::nan(""), -inf, -inf});
  for (double v : softmax(x, 0).to_vector()) CHECK(std::isnan(v));
  CHECK(std::isnan(log_softmax(Tensor::from_vector<double>({std::nan("")}), 0).item()));
  CHECK(std::isnan(relu(Tensor::from_vector<double>({std::nan("")})).item()));
  Tensor r = Tensor::from_vector<double>({std::nan(""), 0, -1, 2}).requires_grad_();
  sum(relu(r)).backward();
  CHECK(r.grad().to_vector() == std::vector<double>{1, 0, 0, 1});  // torch passes a NaN input's gradient on
}
