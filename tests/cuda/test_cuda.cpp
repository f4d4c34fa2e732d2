// The ops on a CUDA device against the CPU: the whole gradcheck registry in
// float64 with every case's ops on the GPU (inputs cross over with the
// differentiable to(Device), so central differences perturb them on the
// host), products through cuBLAS, memory and the same-device rule.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "nn/gradcheck_cases.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
const bool nn_cases_registered = (nn::register_gradcheck_cases(), true);
const Device kGpu = Device::cuda(0);

std::vector<Tensor> to_device(const std::vector<Tensor>& xs, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.defined() ? x.to(d) : x);
  return out;
}
}  // namespace

TEST_CASE("every registry case passes gradcheck in float64 with its ops on the GPU", "[cuda][registry]") {
  REQUIRE(nn_cases_registered);
  int checked = 0;
  for (const GradcheckCase& c : gradcheck_registry()) {
    Generator gen(1);
    TensorFn on_gpu = [&c](const std::vector<Tensor>& inputs) {
      return c.fn(to_device(inputs, kGpu)).to(Device::cpu());
    };
    INFO(c.op << " (" << c.label << ")");
    GradcheckResult result;
    try {
      result = gradcheck(on_gpu, c.make_inputs(gen), c.options);
    } catch (const Error& e) {
      FAIL_CHECK(e.what());  // an op without a CUDA kernel says so here
      continue;
    }
    INFO(result.summary());
    CHECK(result.ok);
    ++checked;
  }
  CHECK(checked == static_cast<int>(gradcheck_registry().size()));
}

TEST_CASE("every registry case gives the CPU's value on the GPU, within 1e-12 in float64", "[cuda][registry]") {
  for (const GradcheckCase& c : gradcheck_registry()) {
    Generator gen(2);
    std::vector<Tensor> inputs = c.make_inputs(gen);
    INFO(c.op << " (" << c.label << ")");
    try {
      Tensor cpu = c.fn(inputs);
      Tensor gpu = c.fn(to_device(inputs, kGpu));
      CHECK(gpu.device() == kGpu);
      std::vector<double> a = cpu.to_vector(), b = gpu.to_vector();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 1e-12 * (1 + std::abs(a[i])));
    } catch (const Error& e) {
      FAIL_CHECK(e.what());
    }
  }
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
  CHECK(gpu.memory(0).cached >= (4u << 20));  // kept for the next request of that size
  Tensor x = Tensor::arange(10, DType::Float64).to(kGpu);
  CHECK(x.to(Device::cpu()).to_vector()[9] == 9);
  CHECK_THROWS_WITH(add(x, Tensor::ones({10}, DType::Float64)), Contains("add: inputs on cuda:0 and cpu"));
  CHECK_THROWS_WITH(x.data<double>(), Contains("tensor on cuda:0 was read by CPU code"));
  CHECK_THROWS_WITH(Tensor::zeros({1}, DType::Float32, Device::cuda(cuda_device_count())),
                    Contains("this machine has"));
}
