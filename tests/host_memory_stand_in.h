// A stand-in for CUDA devices whose "device memory" is host memory, for
// machines without a GPU: installed with StandInCudaForTests, it serves
// cuda:0 and cuda:1, and in a build without CUDA the ops run their device
// kernels (autograd/ops/*.cu compiled as C++) on it as host loops. Used by
// tests/test_device.cpp and by the qkv program's stand-in build
// (tests/cli/stand_in_main.cpp).
#pragma once

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "autograd/device.h"

namespace qkv {

// Two "CUDA devices" in host memory; counts what it holds so a test can see
// every block given back, and the copies each way so a test can see where a
// GPU would wait.
class HostMemoryStandIn final : public DeviceBackend {
 public:
  int count() override { return 2; }
  void* allocate(std::size_t bytes, int) override {
    in_use += bytes;
    peak = in_use > peak ? in_use : peak;
    ++blocks;
    // Exact sizes (no padding), so that AddressSanitizer catches a device kernel
    // that reads or writes past a block's end; posix_memalign takes any size.
    void* p = nullptr;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) throw std::bad_alloc();
    // Poisoned as the stand-in's shared memory is (autograd/ops/kernel.h): all bits set, a NaN in every float
    // and double, -1 in every integer, and a bool UBSan refuses to read. A kernel that reads what nothing
    // wrote (a += into a block nobody zeroed) gives NaN on the CPU too, not the zeros a fresh page happens
    // to hold; cudaMalloc promises nothing either.
    std::memset(p, 0xFF, bytes);
    return p;
  }
  void release(void* p, std::size_t bytes, int) override {
    in_use -= bytes;
    --blocks;
    std::free(p);
  }
  void copy_from_host(void* d, const void* s, std::size_t n, int) override {
    ++from_host;
    std::memcpy(d, s, n);
  }
  void copy_to_host(void* d, const void* s, std::size_t n, int) override {
    ++to_host;  // on a GPU: a wait for everything queued
    std::memcpy(d, s, n);
  }
  void copy_within(void* d, const void* s, std::size_t n, int) override { std::memcpy(d, s, n); }
  void fill_zero(void* p, std::size_t n, int) override { std::memset(p, 0, n); }
  void synchronize(int) override {}
  DeviceMemory memory(int) override { return {in_use, peak, 0}; }
  void reset_peak(int) override { peak = in_use; }
  std::string describe(int) override { return "host memory standing in for a GPU"; }
  std::size_t in_use = 0, peak = 0;
  int blocks = 0;
  int64_t from_host = 0, to_host = 0;  // copies each way
};

}  // namespace qkv
