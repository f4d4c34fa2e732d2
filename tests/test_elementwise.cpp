// Elementwise ops: values, NumPy broadcasting, PyTorch's conventions at the
// edges, and the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <tuple>

#include "autograd/autograd.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
Tensor vec(std::vector<double> v, Shape s) { return Tensor::from_vector(v, s); }
}  // namespace

TEST_CASE("binary ops broadcast by NumPy rules", "[elementwise]") {
  Tensor col = vec({1, 2, 3}, {3, 1});
  Tensor row = vec({10, 20}, {2});
  Tensor sum = col + row;
  CHECK(sum.shape() == Shape{3, 2});
  CHECK(sum.to_vector() == std::vector<double>{11, 21, 12, 22, 13, 23});
  CHECK((row - col).to_vector() == std::vector<double>{9, 19, 8, 18, 7, 17});
  CHECK((col * row).to_vector() == std::vector<double>{10, 20, 20, 40, 30, 60});
  CHECK((row / col).to_vector() == std::vector<double>{10, 20, 5, 10, 10.0 / 3, 20.0 / 3});
  Tensor batch = Tensor::ones({2, 1, 4}, DType::Float64);
  CHECK((batch + Tensor::ones({3, 1}, DType::Float64)).shape() == Shape{2, 3, 4});
  CHECK((Tensor::scalar(2, DType::Float64) * col).to_vector() == std::vector<double>{2, 4, 6});
}

TEST_CASE("broadcast backward sums each gradient to its input's shape", "[elementwise]") {
  Tensor a = Tensor::ones({3, 1}, DType::Float64).requires_grad_();
  Tensor b = Tensor::ones({2}, DType::Float64).requires_grad_();
  sum(a * b * 2.0).backward();
  CHECK(a.grad().shape() == Shape{3, 1});
  CHECK(a.grad().to_vector() == std::vector<double>{4, 4, 4});
  CHECK(b.grad().to_vector() == std::vector<double>{6, 6});
}

TEST_CASE("scalar forms and operators", "[elementwise]") {
  Tensor x = vec({1, 2, 4}, {3});
  CHECK((x + 1.0).to_vector() == std::vector<double>{2, 3, 5});
  CHECK((1.0 + x).to_vector() == std::vector<double>{2, 3, 5});
  CHECK((x - 1.0).to_vector() == std::vector<double>{0, 1, 3});
  CHECK((1.0 - x).to_vector() == std::vector<double>{0, -1, -3});
  CHECK((x * 2.0).to_vector() == std::vector<double>{2, 4, 8});
  CHECK((x / 2.0).to_vector() == std::vector<double>{0.5, 1, 2});
  CHECK((4.0 / x).to_vector() == std::vector<double>{4, 2, 1});
  CHECK((-x).to_vector() == std::vector<double>{-1, -2, -4});
}

TEST_CASE("unary functions match the math library", "[elementwise]") {
  std::vector<double> v{-2, -0.5, 0.25, 3};
  Tensor x = vec(v, {4});
  auto each = [&](Tensor t, auto f) {
    std::vector<double> got = t.to_vector();
    for (size_t i = 0; i < v.size(); ++i) CHECK(got[i] == Approx(f(v[i])).margin(1e-15));
  };
  each(exp(x), [](double a) { return std::exp(a); });
  each(tanh(x), [](double a) { return std::tanh(a); });
  each(relu(x), [](double a) { return a > 0 ? a : 0; });
  each(sigmoid(x), [](double a) { return 1 / (1 + std::exp(-a)); });
  each(abs(x), [](double a) { return std::abs(a); });
  each(pow(x, 3), [](double a) { return a * a * a; });
  Tensor p = vec({0.25, 4}, {2});
  CHECK(sqrt(p).to_vector() == std::vector<double>{0.5, 2});
  CHECK(log(p).at({1}) == Approx(std::log(4.0)));
}

TEST_CASE("edge values follow PyTorch", "[elementwise]") {
  // sigmoid saturates without overflow; log(0) is -inf; relu' and |x|' are 0 at 0.
  Tensor big = vec({-1000, 1000}, {2});
  CHECK(sigmoid(big).to_vector() == std::vector<double>{0, 1});
  CHECK(log(vec({0}, {1})).item() == -std::numeric_limits<double>::infinity());
  Tensor zero = vec({0, 0}, {2}).requires_grad_();
  sum(relu(zero) + abs(zero)).backward();
  CHECK(zero.grad().to_vector() == std::vector<double>{0, 0});
  Tensor base = vec({0, 2}, {2}).requires_grad_();
  sum(pow(base, 0)).backward();  // d x^0 = 0, also at x = 0
  CHECK(base.grad().to_vector() == std::vector<double>{0, 0});
  // At -0 and +0, torch 1.13's values and gradients, signs included (its ^0.5 is sqrt, its ^-0.5 1/sqrt).
  const double inf = std::numeric_limits<double>::infinity();
  auto signed_values = [](const Tensor& t) {
    std::vector<double> v = t.to_vector();
    for (double& x : v) x = x == 0 ? std::copysign(1e-300, x) : x;  // -0 and +0 compare unequal
    return v;
  };
  for (auto [e, y, g] : {std::tuple{0.5, std::vector<double>{-0.0, 0.0}, std::vector<double>{-inf, inf}},
                         {-0.5, {-inf, inf}, {-inf, -inf}},
                         {1.5, {0.0, 0.0}, {-0.0, 0.0}},
                         {2.0, {0.0, 0.0}, {-0.0, 0.0}},
                         {3.0, {-0.0, 0.0}, {0.0, 0.0}}}) {
    Tensor zeros = vec({-0.0, 0.0}, {2}).requires_grad_();
    Tensor out = pow(zeros, e);
    sum(out).backward();
    INFO("x^" << e);
    CHECK(signed_values(out) == signed_values(vec(y, {2})));
    CHECK(signed_values(zeros.grad()) == signed_values(vec(g, {2})));
  }
}

TEST_CASE("float32 and float64 both work and stay separate", "[elementwise][errors]") {
  Tensor a32 = Tensor::ones({2});
  Tensor a64 = Tensor::ones({2}, DType::Float64);
  CHECK((a32 + a32).dtype() == DType::Float32);
  CHECK((a64 * 2.0).dtype() == DType::Float64);
  CHECK_THROWS_WITH(a32 + a64, Contains("add: dtypes differ") && Contains("float32") && Contains("float64"));
  CHECK_THROWS_WITH(Tensor::ones({2, 3}) * Tensor::ones({4}), Contains("mul: shapes [2, 3] and [4] do not broadcast"));
  CHECK_THROWS_WITH(exp(Tensor::zeros({2}, DType::Int64)), Contains("exp") && Contains("int64"));
  CHECK_THROWS_WITH(sub(Tensor::ones({3}), Tensor::ones({2, 2})),
                    Contains("sub") && Contains("[3]") && Contains("[2, 2]"));
}

TEST_CASE("large tensors take the threaded path and agree with small ones", "[elementwise][threads]") {
  Tensor x = Tensor::randn({300, 301}, DType::Float64);
  Tensor y = Tensor::randn({301}, DType::Float64);
  Tensor z = tanh(x) * y + 1.0;
  for (int64_t i : {0, 150, 299})
    for (int64_t j : {0, 17, 300})
      // vectorised libm may differ from scalar std::tanh in the last ulp
      CHECK(z.at({i, j}) == Approx(std::tanh(x.at({i, j})) * y.at({j}) + 1.0).epsilon(1e-14));
}

TEST_CASE("less and equal take the scalar in a float32 tensor's dtype, as torch does", "[elementwise][logical]") {
  // torch 1.13: (torch.tensor([2.7]) == 2.7) is True, and 16777217 rounds to 16777216 (2^24) first.
  Tensor f = Tensor::from_vector<float>({2.7f, 16777216.0f, 0.1f});
  CHECK(equal(f, 2.7).to_vector() == std::vector<double>{1, 0, 0});
  CHECK(equal(f, 0.1).to_vector() == std::vector<double>{0, 0, 1});
  CHECK(less(f, 16777217.0).to_vector() == std::vector<double>{1, 0, 1});
  CHECK(equal(f, 1e39).to_vector() == std::vector<double>{0, 0, 0});  // inf as a float
  // float64 and int64 tensors compare in double.
  CHECK(equal(Tensor::from_vector<double>({2.7}), 2.7).item() == 1);
  CHECK(equal(Tensor::from_vector<double>({static_cast<double>(2.7f)}), 2.7).item() == 0);
  CHECK(less(Tensor::from_vector<int64_t>({3, 4}), 3.5).to_vector() == std::vector<double>{1, 0});
  CHECK_THROWS_WITH(less(Tensor::ones({2}, DType::Bool), 1), Contains("less: expects a float or int64 tensor"));
}
