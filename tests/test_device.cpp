// Devices on any machine: parsing, the errors of a build or machine without
// CUDA, and the device plumbing (copies both ways, the same-device rule,
// gradients through to(Device), modules and checkpoints on a device) against
// a stand-in backend whose "device memory" is host memory. Real GPUs are
// tested by tests/cuda/ (label cuda), which skip where none is.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "autograd/autograd.h"
#include "device_checks.h"
#include "host_memory_stand_in.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/gradcheck_cases.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {

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

TEST_CASE("the stand-in's fresh blocks read as NaN, so a kernel that reads what nothing wrote fails", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const std::vector<double> fresh = Tensor::empty({5}, dtype, Device::cuda()).to_vector();
    for (double v : fresh) CHECK(std::isnan(v));
  }
  CHECK(Tensor::empty({3}, DType::Int64, Device::cuda()).to_vector() == std::vector<double>{-1, -1, -1});
  CHECK(Tensor::zeros({3}, DType::Float32, Device::cuda()).to_vector() == std::vector<double>{0, 0, 0});
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

// The device kernels (autograd/ops/*.cu) compile as C++ here and run as host
// loops over the stand-in: tests/device_checks.h holds the checks, which
// tests/cuda/ runs on a real GPU.
TEST_CASE("every registry case runs on the stand-in device: CPU values to 1e-12 and float64 gradients",
          "[device][registry]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  device_checks::registry_matches_cpu(Device::cuda(0));
}

// The tiled attention kernels at sizes the registry's small cases do not
// reach (tests/device_checks.h). The host runs a block's threads in turn;
// run again in reverse order they must give the same bits, which a phase
// that reads what another thread of the same phase writes (a race on a GPU)
// would not.
TEST_CASE("tiled attention on the stand-in device: the CPU's values and gradients, the same bits in any thread order",
          "[device][attention]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  device_checks::attention_matches_cpu(Device::cuda(0), true);
}

TEST_CASE("index_select's backward groups its indices on the device and adds them as the CPU does", "[device][shape]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  device_checks::index_select_backward_matches_cpu(Device::cuda(0));
  kernel::host_threads_reversed_for_tests = true;  // the blocks' tiles: no phase reads what another thread writes
  device_checks::index_select_backward_matches_cpu(Device::cuda(0));
  kernel::host_threads_reversed_for_tests = false;
}

TEST_CASE("a bad index on a device is raised at the next read from it, once, naming its op", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  device_checks::bad_indices_raise_at_the_next_read(Device::cuda(0), Device::cuda(1));
}

// Each copy to the host waits, on a GPU, for all the work queued before it,
// and so does cudaMemcpy from pageable memory (the CUDA backend stages small
// copies through pinned memory instead). A training step needs only its
// batch copied over and its gradient norm and loss read back: positions are
// a slice of their table, the seed gradient a fill, and indices and targets
// are checked by the kernels (autograd/device_faults.h).
TEST_CASE("a GPT training step on a device copies only its batch over and reads only the norm and the loss",
          "[device][models]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  const Device d = Device::cuda(0);
  nn::GPT gpt({.vocab = 11, .context = 8, .width = 16, .heads = 2, .layers = 2});
  gpt.to(d);
  optim::AdamW opt(gpt.named_parameters(), {.lr = 1e-3});
  int64_t launches_a_step = -1;
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const int64_t from_host = stand_in.from_host, to_host = stand_in.to_host, launches = device_launches();
    Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2}, {2, 6}).to(d);
    Tensor targets = Tensor::from_vector<int64_t>({2, 3, 4, 5, 6, -100, 8, 9, 10, 1, 2, 3}, {2, 6}).to(d);
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(gpt.forward(ids), targets);
    loss.backward();
    optim::clip_grad_norm(gpt.named_parameters(), 1.0);
    opt.step();
    CHECK(std::isfinite(loss.item()));
    CHECK(stand_in.from_host - from_host == 2);  // ids and targets
    CHECK(stand_in.to_host - to_host == 3);  // the norm's block sums, then the fault slot (checks pending), the loss
    if (step > 0) CHECK(device_launches() - launches == launches_a_step);  // what bench reports: the same every step
    launches_a_step = device_launches() - launches;
  }
  CHECK(launches_a_step > 0);
}

TEST_CASE("device launches count each kernel and each matrix product once, and nothing on the CPU", "[device]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  Tensor a = Tensor::randn({4, 4}), b = a.to(Device::cuda(0));
  int64_t before = device_launches();
  Tensor c = a * a + a;
  c = matmul(a, a);
  CHECK(device_launches() == before);  // the CPU's ops launch nothing
  c = b * b;
  CHECK(device_launches() == before + 1);
  c = matmul(b, b);
  CHECK(device_launches() == before + 2);  // a product: one cuBLAS call
  c = b.to(Device::cpu());
  CHECK(device_launches() == before + 2);  // copies are not launches
}

TEST_CASE("optimizers and clip_grad_norm step a device's parameters as they step the CPU's", "[device][optim]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  device_checks::optimizers_match_cpu(Device::cuda(1));
  device_checks::many_parameters_match_cpu({Device::cuda(0), Device::cuda(1)});
  kernel::host_threads_reversed_for_tests = true;  // the squares' tree: no phase reads what another thread writes
  device_checks::many_parameters_match_cpu({Device::cuda(0), Device::cuda(1)});
  kernel::host_threads_reversed_for_tests = false;
}

TEST_CASE("every model kind's loss and gradients on the stand-in device equal the CPU's, and a cache generates there",
          "[device][models]") {
  SKIP_IN_CUDA_BUILDS();
  HostMemoryStandIn stand_in;
  StandInCudaForTests guard(stand_in);
  device_checks::models_match_cpu(Device::cuda(0));
}
