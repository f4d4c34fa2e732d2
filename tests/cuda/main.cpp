// The CUDA suite's runner: without a CUDA device it runs nothing and exits
// 77, which ctest reports as skipped (SKIP_RETURN_CODE), not as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "autograd/device.h"

int main(int argc, char** argv) {
  if (qkv::cuda_device_count() == 0) {
    std::printf("no CUDA device visible (%s): the CUDA tests are skipped\n", qkv::cuda_count_error().c_str());
    return 77;
  }
  std::printf("running on cuda:0, %s\n", qkv::device_backend(qkv::Device::cuda()).describe(0).c_str());
  return Catch::Session().run(argc, argv);
}
