// Internal: how an op's device kernels (autograd/ops/*.cu) run. A kernel is a
// small struct whose operator()(i) computes item i; `launch` runs it for every
// i in [0, n) on the tensor's device. Compiled by nvcc (CUDA builds) that is
// a grid-stride CUDA kernel on the GPU. Compiled by the C++ compiler (every
// other build) the same .cu file is plain C++ and the loop runs on the host,
// over the tests' stand-in device: so each kernel's indexing and math are
// checked by the CPU suite, and a GPU adds only the launch.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "autograd/error.h"
#include "autograd/ops/strided_loop.h"
#include "autograd/tensor.h"

#include "autograd/ops/host_device.h"
#if defined(__CUDACC__)
#include "autograd/cuda/runtime.h"
#endif

namespace qkv::kernel {

#if defined(__CUDACC__)
template <class Body> __global__ void grid_stride(int64_t n, Body body) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) body(i);
}
#endif

/// body(i) for every i in [0, n) on `device`; `name` names the kernel in a
/// launch error. Items must not depend on each other (they run in any order).
template <class Body> void launch(const char* name, Device device, int64_t n, const Body& body) {
  if (n <= 0) return;
#if defined(__CUDACC__)
  cuda::DeviceGuard guard(device.index);
  grid_stride<<<cuda::blocks_for(n), cuda::kThreads>>>(n, body);
  cuda::check_launch(name);
#else
  (void)name;
  (void)device;
  for (int64_t i = 0; i < n; ++i) body(i);
#endif
}

constexpr int kMaxDims = 8;

/// Maps a flat index into a contiguous output of some shape to the element
/// offsets of N operands read through strides (0 on broadcast dims): the
/// device form of detail::StridedLoop, whose dim merging it reuses.
template <int N> struct StridedIndex {
  int dims = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};

  QKV_HD void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = dims - 1; d >= 0; --d) {
      int64_t j = i % size[d];
      i /= size[d];
      for (int k = 0; k < N; ++k) off[k] += j * stride[k][d];
    }
  }
};

/// `strides[k]` gives operand k's stride for each dim of `shape`.
template <int N>
StridedIndex<N> strided_index(const char* op, const Shape& shape, const std::array<std::vector<int64_t>, N>& strides) {
  detail::StridedLoop<N> loop(shape, strides);
  StridedIndex<N> index;
  QKV_CHECK(loop.outer_shape.size() < kMaxDims, op, ": ", shape_str(shape), " has more than ", kMaxDims,
            " dims that cannot be merged, the most a device kernel takes");
  for (size_t d = 0; d < loop.outer_shape.size(); ++d, ++index.dims) {
    index.size[d] = loop.outer_shape[d];
    for (int k = 0; k < N; ++k) index.stride[k][d] = loop.outer_strides[d][k];
  }
  index.size[index.dims] = loop.inner;
  for (int k = 0; k < N; ++k) index.stride[k][index.dims] = loop.inner_stride[k];
  ++index.dims;
  return index;
}

}  // namespace qkv::kernel
