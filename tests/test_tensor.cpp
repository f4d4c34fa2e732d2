// Tensor basics: factories, queries, element access, conversion, printing,
// and the seedable generator.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "autograd/autograd.h"

using namespace qkv;
using Catch::Matchers::Contains;

TEST_CASE("factories fill shapes and dtypes", "[tensor]") {
  Tensor z = Tensor::zeros({2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dim() == 2);
  CHECK(z.numel() == 6);
  CHECK(z.size(-1) == 3);
  CHECK(z.dtype() == DType::Float32);
  for (double v : z.to_vector()) CHECK(v == 0);
  for (double v : Tensor::ones({4}, DType::Float64).to_vector()) CHECK(v == 1);
  CHECK(Tensor::full({2}, 2.5).to_vector() == std::vector<double>{2.5, 2.5});
  CHECK(Tensor::arange(4).to_vector() == std::vector<double>{0, 1, 2, 3});
  CHECK(Tensor::arange(1, 2, 0.25, DType::Float64).to_vector() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK_THROWS_AS(Tensor::arange(3, 1), Error);  // as torch: a step leading away from the end (numpy gives [])
  Tensor s = Tensor::scalar(3.5, DType::Float64);
  CHECK(s.dim() == 0);
  CHECK(s.item() == 3.5);
  Tensor v = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(v.at({2, 1}) == 6);
  CHECK(v.at({-1, 0}) == 5);
  Tensor b = Tensor::from_vector(std::vector<bool>{true, false});
  CHECK(b.dtype() == DType::Bool);
  CHECK(b.to_vector() == std::vector<double>{1, 0});
}

TEST_CASE("zeros fills a large recycled block with zeros at any thread count", "[tensor][threads]") {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    { Tensor::full({300001}, 7.0); }  // a dirty block for the allocator's cache (16 KB pieces: 74)
    Tensor z = Tensor::zeros({300001});
    set_num_threads(0);
    std::vector<double> v = z.to_vector();
    CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 0; }));
  }
}

TEST_CASE("bad factory arguments throw qkv::Error", "[tensor][errors]") {
  CHECK_THROWS_WITH(Tensor::zeros({2, -1}), Contains("negative size") && Contains("[2, -1]"));
  CHECK_THROWS_WITH(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), Contains("3 values") && Contains("[2, 2]"));
  CHECK_THROWS_WITH(Tensor::arange(0, 1, 0), Contains("step"));
  CHECK_THROWS_AS(Tensor::randint(3, 3, {2}), Error);
  CHECK_THROWS_WITH(Tensor::zeros({2, 2}).item(), Contains("[2, 2]"));
  CHECK_THROWS_WITH(Tensor::zeros({2, 2}).at({2, 0}), Contains("out of range"));
  CHECK_THROWS_WITH(Tensor::zeros({2, 2}).set({0, -3}, 1), Contains("set: index -3 out of range for dim 1"));
  CHECK_THROWS_WITH(Tensor::zeros({2}).data<double>(), Contains("float32"));
  CHECK_THROWS_WITH(Tensor::zeros({2}).size(1), Contains("dim 1 out of range"));
  CHECK_THROWS_WITH(Tensor().shape(), Contains("undefined"));
  CHECK_THROWS_WITH(Tensor::randn({2}, DType::Int64), Contains("randn") && Contains("int64"));
}

TEST_CASE("set writes one element, to() converts, detach shares, clone copies", "[tensor]") {
  Tensor t = Tensor::zeros({2, 2});
  t.set({1, 0}, 7);
  CHECK(t.at({1, 0}) == 7);
  Tensor d = t.to(DType::Float64);
  CHECK(d.dtype() == DType::Float64);
  CHECK(d.at({1, 0}) == 7);
  CHECK(Tensor::from_vector<float>({1.7f, -2.2f}).to(DType::Int64).to_vector() == std::vector<double>{1, -2});
  Tensor shared = t.detach();
  shared.set({0, 0}, 3);
  CHECK(t.at({0, 0}) == 3);
  Tensor copy = t.clone();
  copy.set({0, 0}, 9);
  CHECK(t.at({0, 0}) == 3);
}

TEST_CASE("printing shows values, dtype and autograd state", "[tensor]") {
  Tensor t = Tensor::from_vector<double>({1, -2.5, 3, 4}, {2, 2});
  std::string text = t.to_string();
  CHECK_THAT(text, Contains("[[  1.0000,  -2.5000],"));
  CHECK_THAT(text, Contains("dtype=float64"));
  Tensor w = Tensor::ones({2}).requires_grad_();
  CHECK_THAT(w.to_string(), Contains("requires_grad=true"));
  CHECK_THAT((w * 2.0).to_string(), Contains("grad_fn=mul_scalar"));
  CHECK_THAT(Tensor::zeros({100, 100}).to_string(), Contains("..."));
  CHECK_THAT(Tensor::from_vector<int64_t>({3, 4}).to_string(), Contains("[3, 4]"));
}

TEST_CASE("the generator is seedable and its state can be saved and restored", "[tensor][random]") {
  manual_seed(42);
  Tensor a = Tensor::randn({5});
  manual_seed(42);
  Tensor b = Tensor::randn({5});
  CHECK(a.to_vector() == b.to_vector());

  Generator gen(3);
  Generator::State saved = gen.state();
  double first = gen.uniform();
  gen.set_state(saved);
  CHECK(gen.uniform() == first);

  // Moments of 100k draws: mean ~0, variance ~1 for normal; [0,1) for uniform.
  Generator g(11);
  Tensor n = Tensor::randn({100000}, DType::Float64, &g);
  CHECK(std::abs(mean(n).item()) < 0.02);
  CHECK(std::abs(var(n).item() - 1) < 0.02);
  Tensor u = Tensor::uniform({100000}, -1, 3, DType::Float64, &g);
  CHECK(max(u).item() < 3);
  CHECK(-max(neg(u)).item() >= -1);
  CHECK(std::abs(mean(u).item() - 1) < 0.02);
  Tensor r = Tensor::randint(2, 5, {1000}, &g);
  for (double v : r.to_vector()) CHECK((v >= 2 && v < 5));
}

TEST_CASE("SkipInitGuard leaves randn and uniform undrawn, without advancing the generator", "[tensor]") {
  Generator gen(7), same(7);
  {
    SkipInitGuard skip;  // (their values are left unset: a file is about to overwrite them)
    CHECK(Tensor::randn({3, 4}, DType::Float32, &gen).shape() == Shape{3, 4});
    Tensor u = Tensor::uniform({5}, -1, 1, DType::Float64, &gen);
    CHECK((u.shape() == Shape{5} && u.dtype() == DType::Float64));
  }
  CHECK(gen.uniform() == same.uniform());  // untouched while the guard was alive
  CHECK(Tensor::randn({2}, DType::Float32, &gen).to_vector() !=
        std::vector<double>(2, 0.0));  // and drawing again after
}
