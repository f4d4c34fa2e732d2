// Internal: how an op's device kernels (autograd/ops/*.cu) run. A kernel is a
// small struct whose operator()(i) computes item i; `launch` runs it for every
// i in [0, n) on the tensor's device. Compiled by nvcc (CUDA builds) that is
// a grid-stride CUDA kernel on the GPU. Compiled by the C++ compiler (every
// other build) the same .cu file is plain C++ and the loop runs on the host,
// over the tests' stand-in device: so each kernel's indexing and math are
// checked by the CPU suite, and a GPU adds only the launch. Kernels whose
// threads share memory and meet at barriers (tiles) use `launch_blocks`.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/device_faults.h"
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
  qkv::detail::count_device_launch();
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

/// Records `value` (found at position `at`, or -1) as the failure of
/// report's check, unless a failure is recorded already: the host raises it
/// at its next read from the device (autograd/device_faults.h). The kernel
/// goes on without the bad index.
QKV_HD inline void report_fault(const FaultReport& report, int64_t value, int64_t at = -1) {
#if defined(__CUDA_ARCH__)
  auto* check = reinterpret_cast<unsigned long long*>(&report.slot->check);
  if (atomicCAS(check, 0ull, static_cast<unsigned long long>(report.check)) != 0ull) return;
#else
  if (report.slot->check != 0) return;
  report.slot->check = report.check;
#endif
  report.slot->value = value;
  report.slot->at = at;
}

/// Tests only: the host runs a block's threads last to first, so that a
/// phase whose threads read what another thread of the same phase writes
/// (a race on a GPU) gives other bits than in the usual order.
inline bool host_threads_reversed_for_tests = false;

/// The threads of one block of launch_blocks. `each(f)` runs f(t) for every
/// thread t in [0, Threads), then waits for all of them (a barrier), so that
/// what one `each` writes to the block's shared memory the next may read. On
/// a GPU thread t runs f(threadIdx.x) and __syncthreads(); on the host the
/// threads run one after another. A block's code outside `each` runs in every
/// thread alike: it may read shared memory, and writes only inside `each`.
template <int Threads> struct BlockThreads {
  static constexpr int kCount = Threads;
  template <class F> QKV_HD void each(const F& f) const {
#if defined(__CUDA_ARCH__)
    f(static_cast<int>(threadIdx.x));
    __syncthreads();
#else
    for (int t = 0; t < Threads; ++t) f(host_threads_reversed_for_tests ? Threads - 1 - t : t);
#endif
  }
};

#if defined(__CUDACC__)
template <class Body> __global__ void __launch_bounds__(Body::kThreads) block_stride(int64_t blocks, Body body) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto& shared = *reinterpret_cast<typename Body::Shared*>(shared_bytes);
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) body(b, shared, BlockThreads<Body::kThreads>{});
}
#endif

/// body(b, shared, threads) for every block b in [0, blocks) on `device`:
/// Body::kThreads threads share one Body::Shared (a plain struct in the
/// GPU's shared memory) and meet at barriers through threads.each (above).
/// Blocks must not depend on each other. The host starts each block with
/// its shared memory all ones bits (NaN in every float), so a kernel that
/// reads what it never wrote fails its tests there.
template <class Body> void launch_blocks(const char* name, Device device, int64_t blocks, const Body& body) {
  using Shared = typename Body::Shared;
  static_assert(std::is_trivially_default_constructible_v<Shared>, "shared memory is not constructed");
  static_assert(sizeof(Shared) <= 160 * 1024, "more shared memory than an sm_80 block may have");
  if (blocks <= 0) return;
  qkv::detail::count_device_launch();
#if defined(__CUDACC__)
  cuda::DeviceGuard guard(device.index);
  if constexpr (sizeof(Shared) > 48 * 1024) {  // past the default, allowed once per device (a driver call)
    static std::atomic<uint64_t> allowed{0};
    const uint64_t bit = device.index < 64 ? uint64_t{1} << device.index : 0;  // past 64 devices: every time
    if (!bit || !(allowed.load(std::memory_order_relaxed) & bit)) {
      cuda::check(cudaFuncSetAttribute(block_stride<Body>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(sizeof(Shared))),
                  name);
      allowed.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  const unsigned grid = static_cast<unsigned>(blocks < (int64_t{1} << 31) - 1 ? blocks : (int64_t{1} << 31) - 1);
  block_stride<<<grid, Body::kThreads, sizeof(Shared)>>>(blocks, body);
  cuda::check_launch(name);
#else
  (void)name;
  (void)device;
  std::unique_ptr<Shared> shared(new Shared);
  for (int64_t b = 0; b < blocks; ++b) {
    std::memset(static_cast<void*>(shared.get()), 0xFF, sizeof(Shared));
    body(b, *shared, BlockThreads<Body::kThreads>{});
  }
#endif
}

// ---- sums down columns by blocks of threads ----
// A block of kReduceThreads threads takes `width` adjacent columns (a power
// of two up to 32, so a warp reads whole rows of them) and 256/width lanes
// of rows: thread t is lane t / width of column t % width and sums every
// (256/width)th row from its lane on, then add_lanes adds the lanes of each
// column up a fixed tree. The order depends on the shape alone, so the sums
// are the same on every run; each column gets 256/width threads where one
// thread per column (a few hundred threads on a GPU of thousands) would walk
// every row alone.
constexpr int kReduceThreads = 256;
/// The columns a block takes for `columns` columns.
inline int reduce_width(int64_t columns) {
  int width = 1;
  while (width < 32 && width < columns) width *= 2;
  return width;
}
/// N sums a thread, in shared memory.
template <int N> struct LaneSums { double v[N][kReduceThreads]; };
/// After each thread t wrote its sums to sums.v[k][t], adds each column's
/// lanes: threads t < width then hold its column's totals.
template <int N> QKV_HD void add_lanes(LaneSums<N>& sums, int width, const BlockThreads<kReduceThreads>& threads) {
  for (int half = kReduceThreads / width / 2; half > 0; half /= 2)
    threads.each([&](int t) {
      if (t / width < half)
        for (int k = 0; k < N; ++k) sums.v[k][t] += sums.v[k][t + half * width];
    });
}

// ---- sums along rows by blocks of threads ----
// A block of kReduceThreads threads takes 256/lanes rows of a row-major
// matrix, `lanes` threads a row (reduce_width of the row's length: 32 for
// rows of 32 values or more, so a warp reads 32 adjacent values): thread t
// is lane t % lanes of row t / lanes and sums every lanes-th value from its
// lane on, then fold_row_lanes combines each row's lanes up a fixed tree.
/// Where the threads of block `block` stand among rows of `lanes` lanes:
/// thread u is lane lane(u) of row row(u), and head(u) is the thread of
/// lane 0 of that row (where fold_row_lanes leaves the row's result).
struct RowLanes {
  int lanes;
  int64_t first;  // the block's first row
  QKV_HD RowLanes(int64_t block, int lanes_) : lanes(lanes_), first(block * (kReduceThreads / lanes_)) {}
  QKV_HD int64_t row(int u) const { return first + u / lanes; }
  QKV_HD int lane(int u) const { return u % lanes; }
  QKV_HD int head(int u) const { return u / lanes * lanes; }
};
/// The blocks that `rows` rows of `lanes` lanes take.
inline int64_t row_blocks(int64_t rows, int lanes) {
  const int64_t per_block = kReduceThreads / lanes;
  return (rows + per_block - 1) / per_block;
}
/// Folds each row's lanes up a fixed tree: fold(t, t + half) for every lane
/// t < half, half = lanes/2, ..., 1, a barrier each, so that a row's lane 0
/// ends with what fold made of all its lanes.
template <class Fold>
QKV_HD void fold_row_lanes(const BlockThreads<kReduceThreads>& threads, int lanes, const Fold& fold) {
  for (int half = lanes / 2; half > 0; half /= 2)
    threads.each([&](int t) {
      if (t % lanes < half) fold(t, t + half);
    });
}
/// After each thread t wrote its sums to sums.v[k][t] (k in [k0, k1),
/// default all), adds each row's lanes: thread (row·lanes)'s slots then
/// hold that row's totals.
template <int N> QKV_HD void add_row_lanes(LaneSums<N>& sums, const BlockThreads<kReduceThreads>& threads, int lanes,
                                           int k0 = 0, int k1 = N) {
  fold_row_lanes(threads, lanes, [&](int into, int from) {
    for (int k = k0; k < k1; ++k) sums.v[k][into] += sums.v[k][from];
  });
}

constexpr int kMaxDims = 8;

/// Maps a flat index into a contiguous output of some shape to the element
/// offsets of N operands read through strides (0 on broadcast dims): the
/// device form of detail::StridedLoop, whose dim merging it reuses.
template <int N> struct StridedIndex {
  int dims = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};

  /// i < the product of the sizes: what is left of i at dim 0 is its index
  /// there, so a contiguous walk (one merged dim) divides nothing (a 64-bit
  /// division is a long instruction sequence on a GPU).
  QKV_HD void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = dims - 1; d > 0; --d) {
      int64_t j = i % size[d];
      i /= size[d];
      for (int k = 0; k < N; ++k) off[k] += j * stride[k][d];
    }
    for (int k = 0; k < N; ++k) off[k] += i * stride[k][0];
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
