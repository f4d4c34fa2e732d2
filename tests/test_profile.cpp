// The region profile (qkv bench --profile): which loops and products a step
// spends its time in, each named by its call site or shape, counted once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "autograd/autograd.h"
#include "autograd/ops/matmul.h"
#include "autograd/profile.h"

using namespace qkv;

namespace {
const profile::Region* find(const std::vector<profile::Region>& regions, const std::string& part) {
  for (const profile::Region& r : regions)
    if (r.name.find(part) != std::string::npos) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("profile: each top-level loop is one region named by its function and call site", "[profile]") {
  std::vector<float> out(1 << 16);
  profile::start();
  for (int i = 0; i < 3; ++i)
    parallel_for(static_cast<int64_t>(out.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) out[j] = static_cast<float>(j);
    });
  const int line = __LINE__ - 3;
  auto regions = profile::stop();
  REQUIRE(regions.size() == 1);
  const std::string &name = regions[0].name, site = "(test_profile.cpp:" + std::to_string(line) + ")";
  CHECK(name.rfind("loop ", 0) == 0);  // "loop <the test's function> (test_profile.cpp:LINE)"
  CHECK(name.size() > site.size());
  CHECK(name.substr(name.size() - site.size()) == site);
  CHECK(regions[0].calls == 3);
  CHECK(regions[0].items == 3 * (1 << 16));
  CHECK(regions[0].seconds > 0);
  CHECK(profile::stop().empty());  // stop took the totals
}

TEST_CASE("profile: a product is named by its shape and flags, and regions inside a region are part of it",
          "[profile]") {
  set_num_threads(2);
  Tensor a = Tensor::randn({64, 32}), b = Tensor::randn({48, 32});
  Tensor c = Tensor::empty({64, 48});
  profile::start();
  gemm<float>(false, true, 64, 48, 32, a.data<float>(), 32, b.data<float>(), 32, c.data<float>(), 48, 0.0f);
  parallel_for(4, 1 << 20, [&](int64_t begin, int64_t end) {  // products inside a loop belong to the loop
    for (int64_t i = begin; i < end; ++i)
      gemm<float>(false, true, 64, 48, 32, a.data<float>(), 32, b.data<float>(), 32, c.data<float>(), 48, 0.0f);
  });
  auto regions = profile::stop();
  set_num_threads(0);
  REQUIRE(regions.size() == 2);
  const profile::Region* product = find(regions, "sgemm 64x48x32 NT blas");
  REQUIRE(product);
  CHECK(product->calls == 1);
  CHECK(product->forked == 0);  // 98k multiply-adds: too small to fork
  const profile::Region* loop = find(regions, "loop ");
  REQUIRE(loop);
  CHECK(loop->calls == 1);
  CHECK(loop->items == 4);
  CHECK(loop->forked == 1);
}

TEST_CASE("profile: off, nothing is recorded", "[profile]") {
  parallel_for(1 << 16, 1, [](int64_t, int64_t) {});
  profile::start();
  auto regions = profile::stop();
  CHECK(regions.empty());
  parallel_for(1 << 16, 1, [](int64_t, int64_t) {});
  profile::start();
  CHECK(profile::stop().empty());
}
