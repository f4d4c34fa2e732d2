// The backward engine: topological order, accumulation, graph release,
// grad mode, and its error messages.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"

using namespace qkv;
using Catch::Matchers::Contains;

TEST_CASE("backward through a diamond adds both paths", "[engine]") {
  // y = x·x + x·3 uses x three times: dy/dx = 2x + 3.
  Tensor x = Tensor::from_vector<double>({1, -2}).requires_grad_();
  Tensor y = sum(x * x + x * 3.0);
  y.backward();
  CHECK(x.grad().to_vector() == std::vector<double>{5, -1});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[engine]") {
  Tensor w = Tensor::from_vector<double>({2}).requires_grad_();
  (w * 3.0).backward(Tensor::ones({1}, DType::Float64));
  (w * 3.0).backward(Tensor::ones({1}, DType::Float64));
  CHECK(w.grad().item() == 6);
  w.zero_grad();
  CHECK_FALSE(w.grad().defined());
  sum(w * w).backward();
  CHECK(w.grad().item() == 4);
  // A non-leaf that retains its gradient adds up too, as torch's (it was overwritten: 3 3 3, not 2h + 3).
  Tensor y = Tensor::from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor h = y * 2.0;
  h.retain_grad();
  sum(h * h).backward(Tensor(), /*retain_graph=*/true);
  sum(h * 3.0).backward();
  CHECK(h.grad().to_vector() == std::vector<double>{7, 11, 15});
}

TEST_CASE("the graph is freed after backward unless retained", "[engine][errors]") {
  Tensor x = Tensor::ones({2}).requires_grad_();
  Tensor loss = sum(exp(x));
  loss.backward();
  CHECK_THROWS_WITH(loss.backward(), Contains("already freed") && Contains("retain_graph"));

  Tensor kept = sum(exp(x));
  x.zero_grad();
  kept.backward({}, true);
  kept.backward();
  CHECK(x.grad().at({0}) == Approx(2 * std::exp(1.0)));
}

TEST_CASE("backward rejects what it cannot differentiate", "[engine][errors]") {
  Tensor plain = Tensor::ones({2});
  CHECK_THROWS_WITH(sum(plain).backward(), Contains("does not require grad"));
  Tensor x = Tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH((x * 2.0).backward(), Contains("not a scalar") && Contains("[2]"));
  CHECK_THROWS_WITH((x * 2.0).backward(Tensor::ones({3})),
                    Contains("backward: the gradient given, [3] float32 on cpu, does not match the tensor, [2]"));
  CHECK_THROWS_WITH((x * 2.0).requires_grad_(), Contains("leaf"));
  CHECK_THROWS_WITH(Tensor::zeros({2}, DType::Int64).requires_grad_(), Contains("int64"));
  Tensor out = x.detach();
  CHECK_THROWS_WITH(record("no_such_op", out, {x}, nullptr), Contains("no_such_op") && Contains("QKV_DECLARE_OP"));
}

TEST_CASE("NoGradGuard stops recording and its results are plain leaves", "[engine]") {
  Tensor x = Tensor::ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    CHECK_FALSE(grad_enabled());
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    { NoGradGuard nested; }
    CHECK_FALSE(grad_enabled());
  }
  CHECK(grad_enabled());
  CHECK((x * 2.0).requires_grad());
  CHECK_FALSE(x.detach().requires_grad());
}

TEST_CASE("only inputs that require grad receive one", "[engine]") {
  Tensor a = Tensor::ones({2, 2}).requires_grad_();
  Tensor b = Tensor::full({2, 2}, 3);
  sum(matmul(a, b)).backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  CHECK(a.grad().to_vector() == std::vector<double>{6, 6, 6, 6});
}

TEST_CASE("a long chain backpropagates without recursion", "[engine]") {
  Tensor x = Tensor::ones({1}, DType::Float64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  sum(y).backward();
  CHECK(x.grad().item() == 1);
}

TEST_CASE("a deep graph dropped without backward is freed without deep recursion", "[engine]") {
  Tensor x = Tensor::ones({1}).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < 200000; ++i) y = y + 1.0;
  }  // a recursive teardown of 200k nodes would overflow the stack here
  CHECK(x.requires_grad());
}

TEST_CASE("a deep graph whose ops read one tensor twice is freed without recursion", "[engine]") {
  Tensor x = Tensor::ones({1}).requires_grad_();
  {
    Tensor h = x;
    for (int i = 0; i < 200000; ++i) h = h * h;
  }
  CHECK(x.requires_grad());
}

TEST_CASE("a leaf's gradient accumulates in place, so a held handle stays current", "[engine]") {
  Tensor w = Tensor::from_vector<double>({1, 2}).requires_grad_();
  sum(w * 2.0).backward();
  Tensor held = w.grad();
  sum(w * 3.0).backward();
  CHECK(held.to_vector() == std::vector<double>{5, 5});
}
