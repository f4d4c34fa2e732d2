// The ops on a CUDA device against the CPU: the whole gradcheck registry in
// float64 with every case's ops on the GPU, the optimizers, every model kind,
// products through cuBLAS, memory and the same-device rule.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "../attention_reference.h"
#include "../device_checks.h"
#include "autograd/autograd.h"
#include "autograd/ops/attention.h"
#include "nn/nn.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
const Device kGpu = Device::cuda(0);

bool cache_off() {  // the backend's rule for QKV_CUDA_NO_CACHE: set, and not "0"
  const char* v = std::getenv("QKV_CUDA_NO_CACHE");
  return v && *v && std::string(v) != "0";
}
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
  if (!cache_off()) CHECK(gpu.memory(0).cached >= (4u << 20));
  Tensor x = Tensor::arange(10, DType::Float64).to(kGpu);
  CHECK(x.to(Device::cpu()).to_vector()[9] == 9);
  CHECK_THROWS_WITH(add(x, Tensor::ones({10}, DType::Float64)), Contains("add: inputs on cuda:0 and cpu"));
  CHECK_THROWS_WITH(x.data<double>(), Contains("tensor on cuda:0 was read by CPU code"));
  CHECK_THROWS_WITH(Tensor::zeros({1}, DType::Float32, Device::cuda(cuda_device_count())),
                    Contains("this machine has"));
}

TEST_CASE("peak device memory counts the bytes tensors asked for, not the allocator's rounding", "[cuda][memory]") {
  DeviceBackend& gpu = device_backend(kGpu);
  gpu.synchronize(0);
  const std::size_t before = gpu.memory(0).in_use;
  gpu.reset_peak(0);
  {
    Tensor t = Tensor::empty({(3 << 20) / 8}, DType::Float32, kGpu);  // 1.5 MiB: the cache rounds it to 2 MiB
    CHECK(gpu.memory(0).in_use == before + (3u << 19));
  }
  CHECK(gpu.memory(0).peak == before + (3u << 19));
  CHECK(gpu.memory(0).in_use == before);
}

TEST_CASE("a device full of tensors and cached blocks still allocates and multiplies", "[cuda][memory]") {
  if (cache_off()) {
    WARN("QKV_CUDA_NO_CACHE: no cache to give back");
    return;
  }
  Generator gen(7);
  Tensor a = Tensor::randn({1024, 4096}, DType::Float32, &gen);
  Tensor a_gpu = a.to(kGpu);
  // Fill the device with 256 MiB blocks until cudaMalloc (and the allocator's retry) gives up, then free the
  // last 8 into the cache: the device is full, 2 GiB of it held by the cache in blocks of another size.
  std::vector<Tensor> blocks;
  for (;;) {
    try {
      blocks.push_back(Tensor::empty({64 << 20}, DType::Float32, kGpu));
    } catch (const Error&) {
      break;
    }
  }
  INFO(blocks.size() << " blocks of 256 MiB filled the device");
  REQUIRE(blocks.size() > 8);
  blocks.resize(blocks.size() - 8);
  CHECK(device_backend(kGpu).memory(0).cached >= (std::size_t{2} << 30));
  // A product's output (16 MiB) and cuBLAS's workspace: each fails at first, the cache goes back, each succeeds.
  Tensor c = matmul(a_gpu, a_gpu, false, true);
  std::vector<double> want = matmul(a, a, false, true).to_vector(), got = c.to_vector();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); i += 997)
    CHECK(std::abs(got[i] - want[i]) <= 1e-3 * (1 + std::abs(want[i])));
}

// ---- sizes only a GPU meets: grids past 65,535 blocks, long sequences, indices past 2^31 ----
// (The tolerances are the CPU tests' until a GPU run measures these sizes.)
TEST_CASE("fused attention at 4,096 tokens equals the composed path on the GPU, gradients included", "[cuda][large]") {
  Generator gen(3);
  const int64_t n = 4096, H = 2, d = 32;
  auto leaf = [&] { return Tensor::randn({1, n, H, d}, DType::Float32, &gen).to(kGpu).requires_grad_(); };
  Tensor q = leaf(), k = leaf(), v = leaf(), g = Tensor::randn({1, n, H, d}, DType::Float32, &gen).to(kGpu);
  AttentionMasks causal;
  causal.causal = true;
  Tensor fused = fused_attention(q, k, v, causal, 1.0 / std::sqrt(double(d)));
  fused.backward(g);
  std::vector<Tensor> grads{q.grad(), k.grad(), v.grad()};
  for (Tensor* t : {&q, &k, &v}) t->zero_grad();
  Tensor reference = testing::composed_attention(q, k, v, causal);
  reference.backward(g);
  CHECK(testing::worst_excess(fused, reference, 1e-5) <= 1e-6);
  CHECK(testing::worst_excess(grads[0], q.grad(), 1e-5) <= 1e-6);
  CHECK(testing::worst_excess(grads[1], k.grad(), 1e-5) <= 1e-6);
  CHECK(testing::worst_excess(grads[2], v.grad(), 1e-5) <= 1e-6);
}

TEST_CASE("fused attention at 16,384 tokens equals the composed path on the GPU (forward)", "[cuda][large]") {
  Generator gen(4);
  const int64_t n = 16384, d = 32;
  auto make = [&] { return Tensor::randn({1, n, 1, d}, DType::Float32, &gen).to(kGpu); };
  Tensor q = make(), k = make(), v = make();
  AttentionMasks causal;
  causal.causal = true;
  Tensor fused = fused_attention(q, k, v, causal, 1.0 / std::sqrt(double(d)));
  CHECK(testing::worst_excess(fused, testing::composed_attention(q, k, v, causal), 1e-5) <=
        1e-6);  // the composed scores: 1 GiB
}

TEST_CASE("an elementwise op and row and column sums past 65,535 blocks give the CPU's values", "[cuda][large]") {
  Generator gen(5);
  Tensor a = Tensor::randn({(int64_t{1} << 25) + 3}, DType::Float32, &gen);  // 131,073 blocks of 256 threads
  Tensor b = Tensor::randn(a.shape(), DType::Float32, &gen);
  CHECK(testing::worst_excess(add(a.to(kGpu), b.to(kGpu)), add(a, b), 0) == 0);  // one rounding: the same bits
  for (Shape shape : {Shape{70000, 33}, Shape{33, 70000}}) {
    INFO(shape_str(shape));
    Tensor x = Tensor::randn(shape, DType::Float64, &gen);
    for (int64_t dim : {0, 1}) CHECK(testing::worst_excess(sum(x.to(kGpu), {dim}), sum(x, {dim}), 1e-12) <= 1e-12);
  }
}

TEST_CASE("an elementwise op reaches elements past index 2^31", "[cuda][large]") {
  const int64_t n = (int64_t{1} << 31) + 1000;  // 8 GiB of float32
  Tensor x;
  try {
    x = Tensor::full({n}, 1.5, DType::Float32, kGpu);
  } catch (const Error& e) {
    WARN("not enough device memory for 2^31 + 1000 floats: " << e.what());
    return;
  }
  x.set({n - 1}, 7);
  Tensor y = mul(x, 2.0);
  CHECK(y.at({n - 1}) == 14);
  CHECK(y.at({int64_t{1} << 31}) == 3);
  CHECK(y.at({(int64_t{1} << 31) - 1}) == 3);
  CHECK(y.at({0}) == 3);
}
