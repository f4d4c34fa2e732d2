// One thread setting drives qkv's loops and OpenBLAS; results do not depend
// on the thread count.
#include <catch2/catch.hpp>

#include <cblas.h>

#include "autograd/autograd.h"

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
