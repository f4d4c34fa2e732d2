// distributed/ in one process (tests/mpi/ and tests/cli/mpi_train.sh run 2 ranks).
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "distributed/dist.h"

using namespace qkv;

TEST_CASE("slice_of splits a global batch into contiguous slices differing by at most one") {
  for (int ranks : {1, 2, 3, 7}) {
    for (int64_t global : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{16}, int64_t{100}}) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        dist::Slice s = dist::slice_of(global, r, ranks);
        CHECK(s.first == next);
        CHECK((s.count == global / ranks || s.count == global / ranks + 1));
        next += s.count;
      }
      CHECK(next == global);
    }
  }
  CHECK(dist::slice_of(7, 0, 2).count == 4);
  CHECK(dist::slice_of(7, 1, 2).first == 4);
  CHECK_THROWS_WITH(dist::slice_of(4, 2, 2), Catch::Matchers::Contains("rank 2 of 2"));
}

TEST_CASE("parameter_hash changes with one bit, a shape or a dtype") {
  Tensor a = Tensor::arange(10), b = Tensor::arange(10);
  uint64_t h = dist::parameter_hash({a});
  CHECK(dist::parameter_hash({b}) == h);
  b.data<float>()[3] = std::nextafter(3.0f, 4.0f);
  CHECK(dist::parameter_hash({b}) != h);
  CHECK(dist::parameter_hash({reshape(a, {2, 5})}) != h);
  CHECK(dist::parameter_hash({a.to(DType::Float64)}) != h);
}

TEST_CASE("in a world of one, averaging gradients keeps them and leaves missing ones missing") {
  dist::init(nullptr, nullptr);  // not started by mpirun: stays one process
  CHECK(dist::world_size() == 1);
  CHECK(dist::rank() == 0);
  Tensor w = Tensor::ones({2, 3}).requires_grad_(), unused = Tensor::ones({4}, DType::Float64).requires_grad_();
  sum(w * 3.0).backward();
  size_t bytes = dist::average_gradients({w, unused});
  CHECK(bytes == 6 * 4);
  CHECK(w.grad().data<float>()[5] == 3.0f);
  CHECK(!unused.grad().defined());
  std::vector<double> values{1.5, -2};
  dist::sum(values);
  CHECK(values == std::vector<double>{1.5, -2});
  CHECK(dist::same_on_all_ranks(42));
}
