// The backward engine: topological order, accumulation, graph release,
// grad mode, and its error messages.
#include <catch2/catch.hpp>

#include <thread>

#include "autograd/autograd.h"
#include "nn/nn.h"
#include "optim/optim.h"

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

TEST_CASE("rows selected into a gradient already gathered add in place, as the dense sum would", "[engine]") {
  // w [6, 3] feeds a lookup of rows 4, 1, 4, 0 and, later in the forward, a product: backward meets the
  // product first, then the lookup adds each row's picks, summed from 0, into that gradient (index_select's
  // AddIntoFn) instead of making its own dense one.
  Generator gen(2);
  Tensor w = Tensor::randn({6, 3}, DType::Float32, &gen).requires_grad_();
  Tensor a = Tensor::randn({4, 3}, DType::Float32, &gen), b = Tensor::randn({6, 3}, DType::Float32, &gen);
  const std::vector<int64_t> ids{4, 1, 4, 0};
  (sum(mul(index_select(w, 0, Tensor::from_vector(ids, {4})), a)) + sum(mul(w, b))).backward();
  std::vector<double> got = w.grad().to_vector(), pa = a.to_vector(), pb = b.to_vector();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 3; ++c) {
      float rows = 0;  // the dense gradient's value: zeros, then each pick in turn
      for (int64_t j = 0; j < 4; ++j)
        if (ids[j] == r) rows += static_cast<float>(pa[j * 3 + c]);
      CHECK(got[r * 3 + c] == static_cast<double>(static_cast<float>(pb[r * 3 + c]) + rows));
    }
}

// Backward closures keep their tensors' storage (detach() shares it): a write between forward and backward
// gave silently wrong gradients, e.g. [-18, -16] for d Σw²/dw at w = [1, 2] after an SGD step in between.
TEST_CASE("backward refuses tensors written in place since the forward, as torch's version counter",
          "[engine][errors]") {
  auto w = [] { return Tensor::from_vector<double>({1, 2}).requires_grad_(); };
  {
    Tensor p = w();
    optim::SGD opt({{"w", p}}, {0.1});
    Tensor loss = sum(p * p);
    sum(p * 3.0).backward();  // a gradient for the step
    opt.step();
    CHECK_THROWS_WITH(loss.backward(), Contains("backward of 'mul': its input 0 ([2] float64 on cpu) was modified in "
                                                "place after the forward (1 write") &&
                                           Contains("run the forward again"));
  }
  {
    Tensor p = w();
    Tensor loss = sum(p * p);
    p.set({0}, 100);
    CHECK_THROWS_WITH(loss.backward(), Contains("its input 0"));
    CHECK_FALSE(p.grad().defined());
  }
  {
    Tensor x = w();
    Tensor y = exp(x);  // exp's backward reads its output
    Tensor loss = sum(y);
    y.detach().set({0}, 100);  // detach() shares the storage
    CHECK_THROWS_WITH(loss.backward(), Contains("backward of 'exp': its output"));
  }
  {
    Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}).requires_grad_();
    Tensor h = x * 1.0;
    Tensor loss = sum(h * h);
    reshape(h, {2, 2}).set({0, 0}, 100);  // an alias of the saved h
    CHECK_THROWS_WITH(loss.backward(), Contains("modified in place"));
  }
  {
    // Nothing is accumulated when one node refuses: a's path alone was fine, and ran first.
    Tensor a = w(), b = w();
    Tensor loss = sum(b * b) + sum(a * 2.0);
    b.set({0}, 7);
    CHECK_THROWS_WITH(loss.backward(), Contains("nothing was accumulated"));
    CHECK_FALSE(a.grad().defined());
  }
  {
    // What a closure keeps besides its inputs: cross-entropy's targets (a target moved past the classes wrote past
    // the gradient's end), a mask.
    Tensor logits = Tensor::zeros({2, 3}, DType::Float64).requires_grad_();
    Tensor targets = Tensor::from_vector<int64_t>({0, 1});
    Tensor ce = nn::cross_entropy(logits, targets);
    targets.set({0}, 1000000);
    CHECK_THROWS_WITH(ce.backward(), Contains("backward of 'cross_entropy': its saved tensor 0 (a target or mask)"));
    Tensor x = w();
    Tensor mask = Tensor::from_vector<bool>({true, false});
    Tensor filled = sum(masked_fill(x, mask, 0.0));
    mask.set({1}, 1);
    CHECK_THROWS_WITH(filled.backward(), Contains("backward of 'masked_fill': its saved tensor 0"));
  }
  // The usual loop, forward, backward, step, again, is untouched; so is an assign_ (new storage).
  Tensor p = w();
  optim::SGD opt({{"w", p}}, {0.1});
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    sum(p * p).backward();
    opt.step();
  }
  CHECK(p.at({0}) == Approx(0.64));
  CHECK(p.at({1}) == Approx(1.28));
  Tensor loss = sum(p * p);
  p.assign_(Tensor::from_vector<double>({5, 5}));
  opt.zero_grad();
  loss.backward();
  CHECK(p.grad().at({0}) == Approx(1.28));  // at the forward's values, as before
  CHECK(p.grad().at({1}) == Approx(2.56));
}

TEST_CASE("record checks what an extension hands it, and backward the gradients it returns", "[engine][errors]") {
  Tensor x = Tensor::from_vector<double>({1, 2}).requires_grad_(),
         y = Tensor::from_vector<double>({3}).requires_grad_();
  Tensor out = Tensor::from_vector<double>({5});
  // "exp" is declared (by the op library); these closures are deliberately wrong.
  record("exp", out, {x, y}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  CHECK_THROWS_WITH(out.backward(), Contains("backward of 'exp' returned 1 gradient for 2 inputs"));
  Tensor none;
  CHECK_THROWS_WITH(record("exp", none, {x}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; }),
                    Contains("record: op 'exp' has no output"));
  Tensor z = Tensor::from_vector<double>({1});
  CHECK_THROWS_WITH(record("exp", z, {x}, nullptr), Contains("has no backward function"));
  Tensor ids = Tensor::from_vector<int64_t>({1});
  CHECK_THROWS_WITH(record("exp", ids, {x}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; }),
                    Contains("int64 output, which cannot carry a gradient"));
  Tensor self = Tensor::from_vector<double>({1}).requires_grad_();
  CHECK_THROWS_WITH(record("exp", self, {self}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; }),
                    Contains("records its output as its own input 0"));
}

TEST_CASE("backward passes in two threads that share a leaf add every gradient", "[engine][threads]") {
  // Accumulation into one .grad was unsynchronised: 7976 of 8000 once.
  Tensor w = Tensor::ones({1}, DType::Float64).requires_grad_();
  auto run = [&] {
    for (int i = 0; i < 2000; ++i) sum(w * 2.0).backward();
  };
  std::thread a(run), b(run);
  a.join();
  b.join();
  CHECK(w.grad().item() == 8000);
}
