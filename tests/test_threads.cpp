// One thread setting drives qkv's loops and OpenBLAS; results do not depend
// on the thread count.
#include <catch2/catch.hpp>

#include <cblas.h>

#include "autograd/autograd.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace qkv;

namespace {
std::vector<double> workload() {
  Generator gen(5);
  Tensor x = Tensor::randn({256, 512}, DType::Float32, &gen);
  Tensor w = Tensor::randn({512, 64}, DType::Float32, &gen);
  Tensor y = softmax(tanh(matmul(x, w)) * 3.0, -1);
  Tensor s = sum(y * y, {0});
  return concat({reshape(s, {-1}), reshape(max(y, {1}), {-1}), reshape(mean(x, {0}), {-1})}, 0).to_vector();
}
}  // namespace

TEST_CASE("set_num_threads sets qkv's and OpenBLAS's thread counts", "[threads]") {
  set_num_threads(2);
  CHECK(get_num_threads() == 2);
  CHECK(openblas_get_num_threads() == 2);
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  CHECK(openblas_get_num_threads() == 1);
  set_num_threads(0);  // back to the default
  CHECK(get_num_threads() >= 1);
}

TEST_CASE("results are bit-identical for 1 and 2 threads", "[threads]") {
  set_num_threads(1);
  std::vector<double> one = workload();
  set_num_threads(2);
  std::vector<double> two = workload();
  set_num_threads(0);
  CHECK(one == two);
}

TEST_CASE(
    "a GPT trained at 1, 2 and 16 threads ends with bit-identical parameters (products large enough for "
    "qkv's own kernel, dropout on)",
    "[threads]") {
  auto train = [](int threads) {
    set_num_threads(threads);
    manual_seed(3);
    nn::GPTConfig c;
    c.vocab = 64, c.context = 64, c.width = 128, c.heads = 4, c.layers = 1, c.dropout = 0.1;
    nn::GPT gpt(c);  // [1024, 128]·[128, 512]ᵀ and the like: 16M–67M multiply-adds each
    optim::AdamOptions o;
    o.lr = 1e-3;
    optim::AdamW opt(gpt.named_parameters(), o);
    for (int step = 0; step < 3; ++step) {
      Tensor ids = Tensor::randint(0, c.vocab, {16, c.context}), targets = Tensor::randint(0, c.vocab, {16, c.context});
      opt.zero_grad();
      nn::cross_entropy(gpt.forward(ids), targets).backward();
      optim::clip_grad_norm(opt.params(), 1.0);
      opt.step();
    }
    set_num_threads(0);
    std::vector<double> all;
    for (const Tensor& p : gpt.parameters()) {
      std::vector<double> v = p.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  std::vector<double> one = train(1);
  bool same_at_2 = train(2) == one, same_at_16 = train(16) == one;  // (Catch would print every value of a vector)
  CHECK(same_at_2);
  CHECK(same_at_16);
}
