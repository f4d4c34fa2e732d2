// Device kernels of the shape ops. Copies move elements as unsigned words of
// the dtype's width, so they serve every dtype. Gradients that add onto
// repeated indices give each thread the elements it writes and add in index
// order: no atomics on values, so sums are the same on every run (as on the
// CPU). Indices are checked here: a bad one is reported, never followed.
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"

namespace qkv::device {

namespace {

// out[i] = src[offset(i)]
template <class U> struct StridedCopyKernel {
  const U* src;
  U* out;
  kernel::StridedIndex<1> index;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[1];
    index.offsets(i, off);
    out[i] = src[off[0]];
  }
};

// out[i] = value (an element's bits)
template <class U> struct FillKernel {
  U* out;
  U value;
  QKV_HD void operator()(int64_t i) const { out[i] = value; }
};

// dst[o, dst_start + j, i] = src[o, src_start + j, i], item = (o, j, i)
template <class U> struct CopyRowsKernel {
  const U* src;
  U* dst;
  int64_t src_mid, src_start, dst_mid, dst_start, len, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t i = item % inner, row = item / inner, j = row % len, o = row / len;
    dst[(o * dst_mid + dst_start + j) * inner + i] = src[(o * src_mid + src_start + j) * inner + i];
  }
};

// out[o, j, i] = x[o, index[j], i]; an index out of range is reported, and
// its rows are zeros.
template <class U> struct IndexSelectKernel {
  const U* x;
  const int64_t* index;
  U* out;
  int64_t n, mid, inner;
  FaultReport fault;
  QKV_HD void operator()(int64_t item) const {
    const int64_t i = item % inner, row = item / inner, j = row % n, o = row / n, r = index[j];
    if (r < 0 || r >= mid) {
      kernel::report_fault(fault, r);
      out[item] = U{};
      return;
    }
    out[item] = x[(o * mid + r) * inner + i];
  }
};

// The backward groups the indices by row on the device, in three steps, so
// that one thread per element of gx adds that row's repeats in index order,
// as the CPU adds them (the same bits), with no atomics on values:
//   counts[r] = #{p : index[p] = r}           (CountRows)
//   starts[r] = Σ_{r' < r} counts[r']         (StartRows)
//   order[starts[r] + #{q < p : index[q] = r}] = p for index[p] = r   (PlaceRows)
// Indices out of range were reported by the forward; here they are skipped.
struct CountRows {
  const int64_t* index;
  int64_t* counts;
  int64_t mid;
  QKV_HD void operator()(int64_t p) const {
    const int64_t r = index[p];
    if (r < 0 || r >= mid) return;
#if defined(__CUDA_ARCH__)
    atomicAdd(reinterpret_cast<unsigned long long*>(counts + r), 1ull);  // a count: the same in any order
#else
    ++counts[r];
#endif
  }
};

// One block: each thread adds a run of counts, thread 0 the runs' totals,
// then each thread writes its run's starts.
struct StartRows {
  static constexpr int kThreads = 256;
  struct Shared {
    int64_t run[kThreads];
  };
  const int64_t* counts;
  int64_t* starts;  // mid + 1
  int64_t mid;
  QKV_HD void operator()(int64_t, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const int64_t chunk = (mid + kThreads - 1) / kThreads;
    threads.each([&](int t) {
      int64_t total = 0;
      for (int64_t r = t * chunk; r < mid && r < (t + 1) * chunk; ++r) total += counts[r];
      sh.run[t] = total;
    });
    threads.each([&](int t) {
      if (t != 0) return;
      int64_t before = 0;
      for (int u = 0; u < kThreads; ++u) {
        const int64_t total = sh.run[u];
        sh.run[u] = before;
        before += total;
      }
      starts[mid] = before;
    });
    threads.each([&](int t) {
      int64_t at = sh.run[t];
      for (int64_t r = t * chunk; r < mid && r < (t + 1) * chunk; ++r) {
        starts[r] = at;
        at += counts[r];
      }
    });
  }
};

// A block per 256 positions p: the earlier indices pass through shared
// memory a tile at a time, and each thread counts those equal to its own.
// That is n²/2 comparisons: a few million for the models' batches (a few
// thousand tokens), but a batch of a million tokens would want a sort.
struct PlaceRows {
  static constexpr int kThreads = 256;
  struct Shared {
    int64_t tile[kThreads];
    int64_t rank[kThreads];
  };
  const int64_t* index;
  const int64_t* starts;
  int64_t* order;
  int64_t n, mid;
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const int64_t first = block * kThreads;
    threads.each([&](int t) { sh.rank[t] = 0; });
    for (int64_t q0 = 0; q0 <= first; q0 += kThreads) {
      threads.each([&](int t) { sh.tile[t] = q0 + t < n ? index[q0 + t] : -1; });
      threads.each([&](int t) {
        const int64_t p = first + t;
        if (p >= n) return;
        const int64_t r = index[p], before = p - q0 < kThreads ? p - q0 : kThreads;  // q < p
        int64_t same = 0;
        for (int64_t u = 0; u < before; ++u) same += sh.tile[u] == r;
        sh.rank[t] += same;
      });
    }
    threads.each([&](int t) {
      const int64_t p = first + t;
      if (p >= n || index[p] < 0 || index[p] >= mid) return;
      order[starts[index[p]] + sh.rank[t]] = p;
    });
  }
};

// gx[o, r, i] = Σ g[o, order[p], i] over p in [starts[r], starts[r + 1]):
// item = (o, r, i), so every element of gx is written once.
template <class T> struct IndexAddRows {
  const T* g;
  const int64_t* starts;
  const int64_t* order;
  T* gx;
  int64_t n, mid, inner;
  QKV_HD void operator()(int64_t item) const {
    const int64_t i = item % inner, r = item / inner % mid, o = item / (inner * mid);
    T acc = 0;
    for (int64_t p = starts[r]; p < starts[r + 1]; ++p) acc += g[(o * n + order[p]) * inner + i];
    gx[item] = acc;
  }
};

// out[p] = x[p with dim d's coordinate replaced by index[p]]; an index out
// of range is reported, and its element is zero.
template <class U> struct GatherKernel {
  const U* x;
  const int64_t* index;
  U* out;
  kernel::StridedIndex<2> walk;  // operand 0: x with dim d's stride 0; operand 1: index
  int64_t dim_stride, dim_size;
  FaultReport fault;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[2];
    walk.offsets(i, off);
    const int64_t at = index[off[1]];
    if (at < 0 || at >= dim_size) {
      kernel::report_fault(fault, at);
      out[i] = U{};
      return;
    }
    out[i] = x[off[0] + at * dim_stride];
  }
};

// gx[fiber, index[fiber, j]] += g[fiber, j] over j along dim d in order; one
// item per fiber (index's elements with every coordinate but d's fixed),
// index viewed as [before, along, after]. Indices out of range (reported by
// the forward) are skipped.
template <class T> struct ScatterAddKernel {
  const T* g;
  const int64_t* index;
  T* gx;
  int64_t along, after;
  kernel::StridedIndex<1> x_fiber;  // fiber number -> x offset of its element at d = 0
  int64_t x_dim_stride, x_dim_size;
  QKV_HD void operator()(int64_t fiber) const {
    int64_t off[1];
    x_fiber.offsets(fiber, off);
    int64_t b = fiber / after, a = fiber % after;
    for (int64_t j = 0; j < along; ++j) {
      int64_t at = (b * along + j) * after + a;
      if (index[at] >= 0 && index[at] < x_dim_size) gx[off[0] + index[at] * x_dim_stride] += g[at];
    }
  }
};

// out = mask ? fill : x
template <class T> struct MaskedFillKernel {
  const T* x;
  const bool* mask;
  T* out;
  T fill;
  kernel::StridedIndex<2> index;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[2];
    index.offsets(i, off);
    out[i] = mask[off[1]] ? fill : x[off[0]];
  }
};

// out = condition ? a : b
template <class T> struct WhereKernel {
  const bool* condition;
  const T* a;
  const T* b;
  T* out;
  kernel::StridedIndex<3> index;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[3];
    index.offsets(i, off);
    out[i] = condition[off[0]] ? a[off[1]] : b[off[2]];
  }
};

}  // namespace

void strided_copy(const Tensor& src, const Tensor& out, const std::vector<int64_t>& strides) {
  auto index = kernel::strided_index<1>("strided_copy", out.shape(), {strides});
  detail::dispatch_bytes(element_size(src.dtype()), [&](auto zero) {
    using U = decltype(zero);
    kernel::launch("strided_copy", src.device(), out.numel(),
                   StridedCopyKernel<U>{static_cast<const U*>(src.device_raw_data()),
                                        static_cast<U*>(out.device_raw_data()), index});
  });
}

void fill(const Tensor& out, const void* element) {
  detail::dispatch_bytes(element_size(out.dtype()), [&](auto zero) {
    using U = decltype(zero);
    U value;
    std::memcpy(&value, element, sizeof(U));
    kernel::launch("fill", out.device(), out.numel(), FillKernel<U>{static_cast<U*>(out.device_raw_data()), value});
  });
}

void copy_rows(const Tensor& src, int64_t src_mid, int64_t src_start, const Tensor& dst, int64_t dst_mid,
               int64_t dst_start, int64_t outer, int64_t len, int64_t inner) {
  detail::dispatch_bytes(element_size(src.dtype()), [&](auto zero) {
    using U = decltype(zero);
    kernel::launch(
        "copy_rows", src.device(), outer * len * inner,
        CopyRowsKernel<U>{static_cast<const U*>(src.device_raw_data()), static_cast<U*>(dst.device_raw_data()), src_mid,
                          src_start, dst_mid, dst_start, len, inner});
  });
}

void index_select(const Tensor& x, const Tensor& index, const Tensor& out, int64_t outer, int64_t mid, int64_t inner,
                  const FaultReport& fault) {
  int64_t n = index.numel();
  detail::dispatch_bytes(element_size(x.dtype()), [&](auto zero) {
    using U = decltype(zero);
    kernel::launch("index_select", x.device(), outer * n * inner,
                   IndexSelectKernel<U>{static_cast<const U*>(x.device_raw_data()), index.device_data<int64_t>(),
                                        static_cast<U*>(out.device_raw_data()), n, mid, inner, fault});
  });
}

void index_select_backward(const Tensor& g, const Tensor& index, const Tensor& gx, int64_t outer, int64_t mid,
                           int64_t inner) {
  const int64_t n = index.numel();
  const int64_t* idx = index.device_data<int64_t>();
  Tensor counts = Tensor::zeros({mid}, DType::Int64, g.device());
  Tensor starts = Tensor::empty({mid + 1}, DType::Int64, g.device());
  Tensor order = Tensor::empty({n}, DType::Int64, g.device());
  kernel::launch("index_select_backward", g.device(), n, CountRows{idx, counts.device_data<int64_t>(), mid});
  kernel::launch_blocks("index_select_backward", g.device(), 1,
                        StartRows{counts.device_data<int64_t>(), starts.device_data<int64_t>(), mid});
  kernel::launch_blocks("index_select_backward", g.device(), (n + PlaceRows::kThreads - 1) / PlaceRows::kThreads,
                        PlaceRows{idx, starts.device_data<int64_t>(), order.device_data<int64_t>(), n, mid});
  dispatch_floating(g.dtype(), "index_select", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("index_select_backward", g.device(), outer * mid * inner,
                   IndexAddRows<T>{g.device_data<T>(), starts.device_data<int64_t>(), order.device_data<int64_t>(),
                                   gx.device_data<T>(), n, mid, inner});
  });
}

void gather(const Tensor& x, int64_t d, const Tensor& index, const Tensor& out, const FaultReport& fault) {
  std::vector<int64_t> xs = contiguous_strides(x.shape());
  int64_t dim_stride = xs[d];
  xs[d] = 0;
  auto walk = kernel::strided_index<2>("gather", index.shape(), {xs, contiguous_strides(index.shape())});
  detail::dispatch_bytes(element_size(x.dtype()), [&](auto zero) {
    using U = decltype(zero);
    kernel::launch("gather", x.device(), index.numel(),
                   GatherKernel<U>{static_cast<const U*>(x.device_raw_data()), index.device_data<int64_t>(),
                                   static_cast<U*>(out.device_raw_data()), walk, dim_stride, x.shape()[d], fault});
  });
}

void scatter_add(const Tensor& g, int64_t d, const Tensor& index, const Tensor& gx) {
  int64_t before = 1, after = 1;
  for (int64_t k = 0; k < d; ++k) before *= index.shape()[k];
  for (int64_t k = d + 1; k < index.dim(); ++k) after *= index.shape()[k];
  Shape fibers = index.shape();
  fibers[d] = 1;
  std::vector<int64_t> xs = contiguous_strides(gx.shape());
  auto x_fiber = kernel::strided_index<1>("gather", fibers, {xs});
  dispatch_floating(g.dtype(), "gather", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("scatter_add", g.device(), before * after,
                   ScatterAddKernel<T>{g.device_data<T>(), index.device_data<int64_t>(), gx.device_data<T>(),
                                       index.shape()[d], after, x_fiber, xs[d], gx.shape()[d]});
  });
}

void masked_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out) {
  auto index = kernel::strided_index<2>(
      "masked_fill", out.shape(),
      {detail::broadcast_strides(x.shape(), out.shape()), detail::broadcast_strides(mask.shape(), out.shape())});
  dispatch_floating(x.dtype(), "masked_fill", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("masked_fill", x.device(), out.numel(),
                   MaskedFillKernel<T>{x.device_data<T>(), mask.device_data<bool>(), out.device_data<T>(),
                                       static_cast<T>(value), index});
  });
}

void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Shape& shape = out.shape();
  auto index = kernel::strided_index<3>(
      "where", shape,
      {detail::broadcast_strides(condition.shape(), shape), detail::broadcast_strides(a.shape(), shape),
       detail::broadcast_strides(b.shape(), shape)});
  dispatch_floating(a.dtype(), "where", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("where", a.device(), out.numel(),
                   WhereKernel<T>{condition.device_data<bool>(), a.device_data<T>(), b.device_data<T>(),
                                  out.device_data<T>(), index});
  });
}

}  // namespace qkv::device
