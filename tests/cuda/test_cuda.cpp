// The ops on a CUDA device against the CPU: the whole gradcheck registry in
// float64 with every case's ops on the GPU, the optimizers, every model kind,
// products through cuBLAS, memory and the same-device rule.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "../device_checks.h"
#include "autograd/autograd.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
const Device kGpu = Device::cuda(0);
}  // namespace

// The checks tests/test_device.cpp runs on the stand-in (tests/device_checks.h).
TEST_CASE("every registry case gives the CPU's value on the GPU and passes gradcheck in float64 there",
          "[cuda][registry]") {
  device_checks::registry_matches_cpu(kGpu);
}

TEST_CASE("optimizers and clip_grad_norm step the GPU's parameters as they step the CPU's", "[cuda][optim]") {
  device_checks::optimizers_match_cpu(kGpu);
  device_checks::many_parameters_match_cpu({kGpu});
}

TEST_CASE("fused attention's tiled kernels on the GPU: the CPU's values and gradients", "[cuda][attention]") {
  device_checks::attention_matches_cpu(kGpu, false);
}

TEST_CASE("index_select's backward groups its indices on the GPU and adds them as the CPU does", "[cuda][shape]") {
  device_checks::index_select_backward_matches_cpu(kGpu);
}

TEST_CASE("a bad index on the GPU is raised at the next read from it, once, naming its op", "[cuda][faults]") {
  device_checks::bad_indices_raise_at_the_next_read(
      kGpu, cuda_device_count() > 1 ? std::optional<Device>(Device::cuda(1)) : std::nullopt);
}

TEST_CASE("small copies to the GPU go through pinned slots and arrive whole and in order, past the slots' count",
          "[cuda][memory]") {
  Tensor total = Tensor::zeros({1000}, DType::Float64, kGpu);
  for (int i = 0; i < 20; ++i)  // each host tensor is freed (and its block reused) as soon as to() returns
    total = add(total, Tensor::full({1000}, i, DType::Float64).to(kGpu));
  CHECK(total.to_vector() == std::vector<double>(1000, 190));
  Tensor big = Tensor::full({int64_t{5} << 18}, 2.0, DType::Float32).to(kGpu);  // 5 MiB: more than a slot
  CHECK(sum(big).item() == 2.0 * (5 << 18));
}

TEST_CASE("every model kind's loss and gradients on the GPU equal the CPU's, and a cache generates there",
          "[cuda][models]") {
  device_checks::models_match_cpu(kGpu);
}

TEST_CASE("cuBLAS products equal the CPU's, batched, broadcast and transposed", "[cuda][matmul]") {
  Generator gen(5);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    double tol = dtype == DType::Float32 ? 1e-5 : 1e-12;
    struct Case {
      Shape a, b;
      bool ta, tb;
    };
    for (Case c : {Case{{7, 5}, {5, 3}, false, false}, Case{{2, 3, 7, 5}, {5, 4}, false, false},
                   Case{{2, 3, 5, 7}, {3, 4, 5}, true, true}, Case{{4, 1, 6, 5}, {3, 5, 2}, false, false},
                   Case{{1, 9}, {9, 300}, false, false}, Case{{3, 0, 4}, {4, 2}, false, false},
                   Case{{3, 4, 0}, {0, 2}, false, false}}) {
      Tensor a = Tensor::randn(c.a, dtype, &gen), b = Tensor::randn(c.b, dtype, &gen);
      Tensor want = matmul(a, b, c.ta, c.tb);
      Tensor got = matmul(a.to(kGpu), b.to(kGpu), c.ta, c.tb);
      INFO(shape_str(c.a) << " @ " << shape_str(c.b) << " " << dtype_name(dtype));
      REQUIRE(got.shape() == want.shape());
      std::vector<double> w = want.to_vector(), g = got.to_vector();
      for (size_t i = 0; i < w.size(); ++i) CHECK(std::abs(w[i] - g[i]) <= tol * (1 + std::abs(w[i])));
    }
  }
}

TEST_CASE("device memory is cached, counted, and freed with the last handle", "[cuda][memory]") {
  DeviceBackend& gpu = device_backend(kGpu);
  gpu.synchronize(0);
  std::size_t before = gpu.memory(0).in_use;
  gpu.reset_peak(0);
  {
    Tensor big = Tensor::zeros({1 << 20}, DType::Float32, kGpu);  // 4 MiB
    CHECK(gpu.memory(0).in_use >= before + (4u << 20));
    CHECK(big.to_vector()[12345] == 0);
  }
  CHECK(gpu.memory(0).in_use == before);
  CHECK(gpu.memory(0).peak >= before + (4u << 20));
  // Kept for the next request of that size, unless the cache is off (on_gpu.sh sanitize turns it off, so that
  // memcheck sees every block's own bounds).
  const char* no_cache = std::getenv("QKV_CUDA_NO_CACHE");  // the backend's rule: set, and not "0"
  if (!(no_cache && *no_cache && std::string(no_cache) != "0")) CHECK(gpu.memory(0).cached >= (4u << 20));
  Tensor x = Tensor::arange(10, DType::Float64).to(kGpu);
  CHECK(x.to(Device::cpu()).to_vector()[9] == 9);
  CHECK_THROWS_WITH(add(x, Tensor::ones({10}, DType::Float64)), Contains("add: inputs on cuda:0 and cpu"));
  CHECK_THROWS_WITH(x.data<double>(), Contains("tensor on cuda:0 was read by CPU code"));
  CHECK_THROWS_WITH(Tensor::zeros({1}, DType::Float32, Device::cuda(cuda_device_count())),
                    Contains("this machine has"));
}
