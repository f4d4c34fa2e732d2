// Devices on any machine: parsing, the errors of a build or machine without
// CUDA, and the device plumbing (copies both ways, the same-device rule,
// gradients through to(Device), modules and checkpoints on a device) against
// a stand-in backend whose "device memory" is host memory. Real GPUs are
// tested by tests/cuda/ (label cuda), which skip where none is.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "autograd/autograd.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/gradcheck_cases.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {

// Two "CUDA devices" in host memory; counts what it holds so a test can see
// every block given back.
class HostMemoryStandIn final : public DeviceBackend {
 public:
  int count() override { return 2; }
  void* allocate(std::size_t bytes, int) override {
    in_use += bytes;
    ++blocks;
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  }
  void release(void* p, std::size_t bytes, int) override {
    in_use -= bytes;
    --blocks;
    std::free(p);
  }
  void copy_from_host(void* d, const void* s, std::size_t n, int) override { std::memcpy(d, s, n); }
  void copy_to_host(void* d, const void* s, std::size_t n, int) override { std::memcpy(d, s, n); }
  void copy_within(void* d, const void* s, std::size_t n, int) override { std::memcpy(d, s, n); }
  void fill_zero(void* p, std::size_t n, int) override { std::memset(p, 0, n); }
  void synchronize(int) override {}
  DeviceMemory memory(int) override { return {in_use, in_use, 0}; }
  void reset_peak(int) override {}
  std::string describe(int) override { return "host memory standing in for a GPU"; }
  std::size_t in_use = 0;
  int blocks = 0;
};

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("devices parse from their names, and bad names are one-line errors", "[device]") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("cuda:12").str() == "cuda:12");
  CHECK(Device::cpu().str() == "cpu");
  CHECK(Device::cuda(3) != Device::cuda(2));
  for (const char* bad : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:1 ", "cuda:0000001", "", "cpu:0"})
    CHECK_THROWS_WITH(Device::parse(bad), Contains("is not a device (cpu, cuda or cuda:N)"));
  CHECK_THROWS_WITH(Device::parse("cuda\n:0"), !Contains("\n"));
}

TEST_CASE("a CUDA tensor without CUDA is a one-line error that says why", "[device]") {
  if (cuda_device_count() > 0)
    SUCCEED("this machine has a GPU: tests/cuda covers it");
  else if (cuda_built())
    CHECK_THROWS_WITH(Tensor::zeros({2}, DType::Float32, Device::cuda()), Contains("no CUDA device is visible"));
  else
    CHECK_THROWS_WITH(Tensor::zeros({2}, DType::Float32, Device::cuda()),
                      Contains("device cuda:0: this build of qkv has no CUDA") && Contains("-DQKV_CUDA=ON"));
  CHECK(Tensor::zeros({2}).device() == Device::cpu());
  CHECK(Tensor::ones({2}).to(Device::cpu()).device().is_cpu());
}

// The stand-in gives host pointers to the ops' CUDA kernels in a CUDA build:
// those builds test the same plumbing on their real device instead.
#define SKIP_IN_CUDA_BUILDS()                                         \
  if (cuda_built()) {                                                 \
    SUCCEED("a CUDA build: tests/cuda checks this on a real device"); \
    return;                                                           \
  }

TEST_CASE("to(Device) copies both ways and data stays where it is put", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  {
    StandInCudaForTests guard(stand_in);
    CHECK(cuda_device_count() == 2);
    Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor on = x.to(Device::cuda(1));
    CHECK(on.device() == Device::cuda(1));
    CHECK(on.shape() == x.shape());
    CHECK(on.to(Device::cuda(1)).impl() == on.impl());  // already there: itself, as torch
    CHECK(on.to_vector() == x.to_vector());             // read through a host copy
    Tensor back = on.to(Device::cpu());
    CHECK(back.device().is_cpu());
    CHECK(back.impl()->storage != x.impl()->storage);  // a copy, not the original
    CHECK(back.to_vector() == x.to_vector());
    CHECK(stand_in.blocks == 1);
    on = Tensor();
    CHECK(stand_in.blocks == 0);  // the device block went back with its last handle
  }
}

TEST_CASE("a device tensor reads and writes through host copies, and CPU code refuses it", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  {
    StandInCudaForTests guard(stand_in);
    Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2}).to(Device::cuda());
    CHECK(x.at({1, 0}) == 3);
    x.set({1, 0}, -7);
    CHECK(x.to(Device::cpu()).to_vector() == std::vector<double>{1, 2, -7, 4});
    CHECK(Tensor::scalar(2.5).to(Device::cuda()).item() == 2.5);
    CHECK_THROWS_WITH(x.data<double>(), Contains("[2, 2] tensor on cuda:0 was read by CPU code"));
    CHECK_THROWS_WITH(x.raw_data(), Contains("on cuda:0"));
    CHECK(x.device_data<double>() != nullptr);  // for the device's own kernels
    Tensor z = Tensor::zeros({3}, DType::Float32, Device::cuda(1));
    CHECK(z.device() == Device::cuda(1));
    CHECK(z.to_vector() == std::vector<double>{0, 0, 0});
    Tensor f = Tensor::full({2}, 1.5, DType::Float64, Device::cuda());
    CHECK(f.to_vector() == std::vector<double>{1.5, 1.5});
    Tensor cast = f.to(DType::Float32);  // a dtype change stays on the device
    CHECK(cast.device() == Device::cuda());
    CHECK(cast.dtype() == DType::Float32);
    CHECK(cast.to_vector() == std::vector<double>{1.5, 1.5});
    CHECK_THAT(f.to_string(), Contains("device=cuda:0"));
    CHECK_THROWS_WITH(Tensor::zeros({1}, DType::Float32, Device::cuda(2)),
                      Contains("this machine has 2 CUDA devices (cuda:0..cuda:1)"));
  }
  CHECK(stand_in.blocks == 0);  // every device block went back
}

TEST_CASE("an op whose inputs sit on two devices is a one-line error", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  Tensor a = Tensor::ones({2, 3});
  Tensor b = Tensor::ones({2, 3}).to(Device::cuda());
  CHECK_THROWS_WITH(add(a, b), Contains("add: inputs on cpu and cuda:0 (move them to one device with .to())"));
  CHECK_THROWS_WITH(mul(b, a), Contains("mul: inputs on cuda:0 and cpu"));
  CHECK_THROWS_WITH(matmul(a, transpose(a, 0, 1).to(Device::cuda(1))), Contains("matmul: inputs on cpu and cuda:1"));
  CHECK_THROWS_WITH(concat({a, b}, 0), Contains("concat: inputs on cpu and cuda:0"));
  CHECK_THROWS_WITH(nn::layer_norm(a, Tensor::ones({3}), Tensor::zeros({3}).to(Device::cuda())),
                    Contains("layer_norm: inputs on cpu and cuda:0"));
  CHECK_THROWS_WITH(where(Tensor::from_vector(std::vector<bool>{true, false, true}, {3}), Tensor::ones({3}),
                          Tensor::ones({3}).to(Device::cuda())),
                    Contains("where: inputs on cpu and cuda:0"));
  // CPU code refuses a device tensor rather than read device memory.
  CHECK_THROWS_WITH(b.data<float>(), Contains("was read by CPU code: this op has no kernel for cuda:0"));
}

TEST_CASE("gradients flow back through to(Device) to the device they came from", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  Tensor x = Tensor::from_vector<double>({1, -2, 3}, {3}).requires_grad_();
  Tensor there = x.to(Device::cuda());
  CHECK(there.requires_grad());
  CHECK(std::string(there.grad_fn()->op) == "to_device");
  Tensor back = there.to(Device::cpu());
  sum(mul(back, back)).backward();  // d/dx sum(x²) = 2x, carried cuda → cpu by each copy's backward
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device().is_cpu());
  CHECK(x.grad().to_vector() == std::vector<double>{2, -4, 6});
  // Device to device goes through the host, and is differentiable too.
  Tensor y = Tensor::from_vector<double>({4, 5}, {2}).requires_grad_();
  sum(y.to(Device::cuda(0)).to(Device::cuda(1)).to(Device::cpu())).backward();
  CHECK(y.grad().to_vector() == std::vector<double>{1, 1});
}

TEST_CASE("a module moves to a device, saves from it and loads onto it", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  Generator gen(3);
  nn::Linear on_cpu(4, 3, true, nn::Init::Torch, &gen);
  std::string dir = (std::filesystem::temp_directory_path() / "qkv-test-device").string();
  std::filesystem::create_directories(dir);
  std::string cpu_file = dir + "/cpu.safetensors", device_file = dir + "/cuda.safetensors";
  std::remove(cpu_file.c_str());
  std::remove(device_file.c_str());
  nn::save_module(cpu_file, on_cpu, {});

  Tensor weight = on_cpu.weight;  // a handle taken before the move stays valid
  on_cpu.to(Device::cuda(1));
  CHECK(on_cpu.device() == Device::cuda(1));
  CHECK(weight.device() == Device::cuda(1));
  for (const Tensor& p : on_cpu.parameters()) CHECK(p.device() == Device::cuda(1));
  CHECK(weight.requires_grad());
  nn::save_module(device_file, on_cpu, {});
  CHECK(file_bytes(device_file) == file_bytes(cpu_file));  // the same file whichever device wrote it

  nn::Linear fresh(4, 3, true, nn::Init::Torch, &gen);
  fresh.to(Device::cuda(0));
  nn::load_into(fresh, io::load_safetensors(cpu_file), cpu_file);
  CHECK(fresh.device() == Device::cuda(0));  // loading keeps the module where it is
  CHECK(fresh.weight.to_vector() == weight.to_vector());
  fresh.to(Device::cpu());
  CHECK(fresh.weight.device().is_cpu());
  CHECK(fresh.weight.to_vector() == weight.to_vector());
}

namespace {
std::vector<Tensor> on_device(const std::vector<Tensor>& xs, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.defined() ? x.to(d) : x);
  return out;
}
}  // namespace

// The device kernels (autograd/ops/*.cu) compile as C++ here and run as host
// loops over the stand-in: every case's value and float64 gradients with its
// ops on the "GPU", as tests/cuda checks them on a real one.
TEST_CASE("every registry case runs on the stand-in device: CPU values to 1e-12 and float64 gradients",
          "[device][registry]") {
  SKIP_IN_CUDA_BUILDS();
  static const bool registered = (nn::register_gradcheck_cases(), true);
  REQUIRE(registered);
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  const Device gpu = Device::cuda(0);
  int checked = 0;
  for (const GradcheckCase& c : gradcheck_registry()) {
    INFO(c.op << " (" << c.label << ")");
    Generator gen(1);
    std::vector<Tensor> inputs = c.make_inputs(gen);
    try {
      Generator::State seed = default_generator().state();  // dropout draws the same mask for both
      Tensor want = c.fn(inputs);
      default_generator().set_state(seed);
      Tensor got = c.fn(on_device(inputs, gpu));
      CHECK(got.device() == (c.op == "to_device" ? Device::cpu() : gpu));  // to_device's cases end on the CPU
      std::vector<double> a = want.to_vector(), b = got.to_vector();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i)
        if (!(std::isnan(a[i]) && std::isnan(b[i]))) CHECK(std::abs(a[i] - b[i]) <= 1e-12 * (1 + std::abs(a[i])));
      TensorFn there = [&c, gpu](const std::vector<Tensor>& xs) { return c.fn(on_device(xs, gpu)).to(Device::cpu()); };
      GradcheckResult result = gradcheck(there, inputs, c.options);
      INFO(result.summary());
      CHECK(result.ok);
      ++checked;
    } catch (const Error& e) {
      FAIL_CHECK(e.what());  // an op without a device kernel says so here
    }
  }
  CHECK(checked == static_cast<int>(gradcheck_registry().size()));
}

TEST_CASE("optimizers and clip_grad_norm step a device's parameters as they step the CPU's", "[device][optim]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  using Make = std::function<std::unique_ptr<optim::Optimizer>(io::NamedTensors)>;
  std::vector<std::pair<std::string, Make>> optimizers = {
      {"SGD", [](io::NamedTensors p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{0.1}); }},
      {"SGD momentum nesterov",
       [](io::NamedTensors p) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{0.1, 0.9, 0, 0.01, true});
       }},
      {"Adam",
       [](io::NamedTensors p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.1});
       }},
      {"AdamW",
       [](io::NamedTensors p) {
         return std::make_unique<optim::AdamW>(p, optim::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.1});
       }},
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (auto& [label, make] : optimizers) {
      INFO(label << " " << dtype_name(dtype));
      Generator gen(4);
      Tensor w0 = Tensor::randn({3, 4}, dtype, &gen), b0 = Tensor::randn({4}, dtype, &gen);
      Tensor c = Tensor::randn({3, 4}, dtype, &gen);
      auto run = [&](Device d) {
        Tensor w = w0.clone().to(d).requires_grad_(), b = b0.clone().to(d).requires_grad_();  // steps update in place
        io::NamedTensors params{{"w", w}, {"b", b}};
        auto opt = make(params);
        double norm = 0;
        for (int step = 0; step < 3; ++step) {
          opt->zero_grad();
          Tensor loss = sum(add(mul(mul(w, w), c.to(d)), mul(b, 3.0)));  // dw = 2wc, db = 3
          loss.backward();
          norm = optim::clip_grad_norm(params, 2.0);  // clips: the gradients' norm is above 2
          opt->step();
        }
        CHECK(w.device() == d);
        for (const auto& [name, buffer] : opt->state()) CHECK(buffer.device() == d);
        return std::make_tuple(w.to_vector(), b.to_vector(), norm);
      };
      auto [w_cpu, b_cpu, n_cpu] = run(Device::cpu());
      auto [w_dev, b_dev, n_dev] = run(Device::cuda(1));
      double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;  // float32: the CPU's vector lanes round differently
      CHECK(std::abs(n_cpu - n_dev) <= tol * n_cpu);
      CHECK(n_cpu > 2);
      for (size_t i = 0; i < w_cpu.size(); ++i) CHECK(std::abs(w_cpu[i] - w_dev[i]) <= tol * (1 + std::abs(w_cpu[i])));
      for (size_t i = 0; i < b_cpu.size(); ++i) CHECK(std::abs(b_cpu[i] - b_dev[i]) <= tol * (1 + std::abs(b_cpu[i])));
    }
  }
}
