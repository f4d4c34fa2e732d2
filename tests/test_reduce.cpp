// Reductions: values, keepdim, dim lists, arg-max gradients, and errors.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
// [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], [[12, ...]]]
Tensor counting() { return reshape(Tensor::arange(24, DType::Float64), {2, 3, 4}); }
}  // namespace

TEST_CASE("sum and mean over dims, with and without keepdim", "[reduce]") {
  Tensor x = counting();
  CHECK(sum(x).item() == 276);
  CHECK(sum(x).dim() == 0);
  Tensor s1 = sum(x, {1});
  CHECK(s1.shape() == Shape{2, 4});
  CHECK(s1.to_vector() == std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  Tensor s02 = sum(x, {0, 2});  // not adjacent: permuted internally
  CHECK(s02.to_vector() == std::vector<double>{60, 92, 124});
  CHECK(sum(x, {-1, 0}, true).shape() == Shape{1, 3, 1});
  CHECK(mean(x, {2}).to_vector() == std::vector<double>{1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
  CHECK(mean(x).item() == 11.5);
  CHECK(sum(Tensor::zeros({3, 0}), {1}).to_vector() == std::vector<double>{0, 0, 0});
}

TEST_CASE("max returns values and routes the gradient to the first arg-max", "[reduce]") {
  Tensor x = Tensor::from_vector<double>({1, 5, 5, 2, 7, 0}, {2, 3}).requires_grad_();
  Tensor m = max(x, {1});
  CHECK(m.to_vector() == std::vector<double>{5, 7});
  sum(m).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 0, 0, 1, 0});
  CHECK(max(counting(), {0, 2}).to_vector() == std::vector<double>{15, 19, 23});
  CHECK(max(counting()).item() == 23);
  CHECK(max(counting(), {1}, true).shape() == Shape{2, 1, 4});
}

TEST_CASE("var uses Bessel's correction by default, like torch.var", "[reduce]") {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, {4});
  CHECK(var(x).item() == Approx(5.0 / 3));
  CHECK(var(x, {}, false, 0).item() == Approx(1.25));
  Tensor rows = Tensor::from_vector<double>({1, 3, 2, 2}, {2, 2});
  CHECK(var(rows, {1}).to_vector() == std::vector<double>{2, 0});
  CHECK(var(rows, {1}, true).shape() == Shape{2, 1});
}

TEST_CASE("sum_to undoes broadcasting", "[reduce]") {
  Tensor x = Tensor::ones({2, 3, 4}, DType::Float64);
  CHECK(sum_to(x, {3, 1}).to_vector() == std::vector<double>{8, 8, 8});
  CHECK(sum_to(x, {4}).to_vector() == std::vector<double>{6, 6, 6, 6});
  CHECK(sum_to(x, {2, 3, 4}).shape() == Shape{2, 3, 4});
  CHECK_THROWS_WITH(sum_to(x, {5}), Contains("[2, 3, 4]") && Contains("[5]"));
}

TEST_CASE("large reductions are exact across the threaded paths", "[reduce][threads]") {
  Tensor x = Tensor::ones({700, 600}, DType::Float64);
  CHECK(sum(x, {0}).at({599}) == 700);
  CHECK(sum(x, {1}).at({699}) == 600);
  CHECK(sum(x).item() == 420000);
}

TEST_CASE("reduction errors name the op and the shape", "[reduce][errors]") {
  Tensor x = counting();
  CHECK_THROWS_WITH(sum(x, {3}), Contains("sum: dim 3 out of range [-3, 2]"));
  CHECK_THROWS_WITH(mean(x, {1, -2}), Contains("mean: dim listed twice"));
  CHECK_THROWS_WITH(max(Tensor::zeros({0, 2})),
                    Contains("max: cannot reduce over zero elements") && Contains("[0, 2]"));
}

TEST_CASE("a mean over nothing and a variance without degrees of freedom are NaN or inf, as in torch", "[reduce]") {
  for (double v : var(Tensor::ones({1, 3}), {0}).to_vector()) CHECK(std::isnan(v));  // 0 / 0
  CHECK(std::isinf(var(Tensor::from_vector<double>({1, 2, 3}), {0}, false, 4).item()));
  // The gradient 2(x - mean)/(N - c): ±inf with N - c = 0 (torch 1.13's values; composed through the mean it
  // was NaN), and NaN where x is the mean.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = Tensor::from_vector<double>({1, 2, 4}).requires_grad_();
  var(x, {0}, false, 3).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{-inf, -inf, inf});
  Tensor one = Tensor::from_vector<double>({5}).requires_grad_();
  var(one, {0}).backward();
  CHECK(std::isnan(one.grad().item()));
  CHECK(std::isnan(mean(Tensor::zeros({0})).item()));
  Tensor rows = mean(Tensor::zeros({3, 0}), {1});
  CHECK(rows.shape() == Shape{3});
  for (double v : rows.to_vector()) CHECK(std::isnan(v));
}

TEST_CASE("masked_mean averages each row's unpadded positions only", "[reduce][masked_mean]") {
  Tensor x = counting().requires_grad_();  // [2, 3, 4], x[b, t, k] = 12b + 4t + k
  Tensor m = masked_mean(x, Tensor::from_vector(std::vector<int64_t>{2, 3}, {2}));
  REQUIRE(m.shape() == Shape{2, 4});
  CHECK(m.at({0, 1}) == Approx((1 + 5) / 2.0));
  CHECK(m.at({1, 3}) == Approx((15 + 19 + 23) / 3.0));
  sum(m).backward();
  CHECK(x.grad().at({0, 1, 0}) == Approx(0.5));
  CHECK(x.grad().at({0, 2, 0}) == 0);  // padding gets no gradient
  CHECK(x.grad().at({1, 2, 3}) == Approx(1 / 3.0));
  CHECK_THROWS_WITH(masked_mean(counting(), Tensor::from_vector(std::vector<int64_t>{2, 4}, {2})),
                    Contains("masked_mean: length 4 of row 1 is not in [1, 3]"));
  CHECK_THROWS_WITH(masked_mean(counting(), Tensor::from_vector(std::vector<int64_t>{2}, {1})),
                    Contains("masked_mean: lengths must be int64 [2], got int64 [1]"));
  CHECK_THROWS_WITH(masked_mean(Tensor::ones({3}), Tensor::from_vector(std::vector<int64_t>{1, 1, 1}, {3})),
                    Contains("masked_mean: x must be [B, T, ...], got [3]"));
}
