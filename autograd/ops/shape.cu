// Device kernels of the shape ops. Copies move elements as unsigned words of
// the dtype's width, so they serve every dtype. Gradients that add onto
// repeated indices give each thread one output column and walk the indices
// in order: no atomics, so sums are the same on every run (as on the CPU).
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

// out[o, j, i] = x[o, index[j], i]
template <class U> struct IndexSelectKernel {
  const U* x;
  const int64_t* index;
  U* out;
  int64_t n, mid, inner;
  QKV_HD void operator()(int64_t item) const {
    int64_t i = item % inner, row = item / inner, j = row % n, o = row / n;
    out[item] = x[(o * mid + index[j]) * inner + i];
  }
};

// gx[o, rows[k], i] += Σ g[o, order[p], i] over p in [starts[k], starts[k + 1]):
// each row's repeats in index order, as the CPU adds them (so the same bits);
// item = (o, k, i), so no two items write one element.
template <class T> struct IndexAddRows {
  const T* g;
  IndexRuns runs;
  T* gx;
  int64_t n, mid, inner;
  QKV_HD void operator()(int64_t item) const {
    const int64_t i = item % inner, k = item / inner % runs.distinct, o = item / (inner * runs.distinct);
    T acc = 0;
    for (int64_t p = runs.starts[k]; p < runs.starts[k + 1]; ++p) acc += g[(o * n + runs.order[p]) * inner + i];
    gx[(o * mid + runs.rows[k]) * inner + i] += acc;
  }
};

// out[p] = x[p with dim d's coordinate replaced by index[p]]
template <class U> struct GatherKernel {
  const U* x;
  const int64_t* index;
  U* out;
  kernel::StridedIndex<2> walk;  // operand 0: x with dim d's stride 0; operand 1: index
  int64_t dim_stride;
  QKV_HD void operator()(int64_t i) const {
    int64_t off[2];
    walk.offsets(i, off);
    out[i] = x[off[0] + index[off[1]] * dim_stride];
  }
};

// gx[fiber, index[fiber, j]] += g[fiber, j] over j along dim d in order; one
// item per fiber (index's elements with every coordinate but d's fixed),
// index viewed as [before, along, after].
template <class T> struct ScatterAddKernel {
  const T* g;
  const int64_t* index;
  T* gx;
  int64_t along, after;
  kernel::StridedIndex<1> x_fiber;  // fiber number -> x offset of its element at d = 0
  int64_t x_dim_stride;
  QKV_HD void operator()(int64_t fiber) const {
    int64_t off[1];
    x_fiber.offsets(fiber, off);
    int64_t b = fiber / after, a = fiber % after;
    for (int64_t j = 0; j < along; ++j) {
      int64_t at = (b * along + j) * after + a;
      gx[off[0] + index[at] * x_dim_stride] += g[at];
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

void index_select(const Tensor& x, const Tensor& index, const Tensor& out, int64_t outer, int64_t mid, int64_t inner) {
  int64_t n = index.numel();
  detail::dispatch_bytes(element_size(x.dtype()), [&](auto zero) {
    using U = decltype(zero);
    kernel::launch("index_select", x.device(), outer * n * inner,
                   IndexSelectKernel<U>{static_cast<const U*>(x.device_raw_data()), index.device_data<int64_t>(),
                                        static_cast<U*>(out.device_raw_data()), n, mid, inner});
  });
}

void index_add(const Tensor& g, const IndexRuns& runs, const Tensor& gx, int64_t outer, int64_t mid, int64_t inner) {
  dispatch_floating(g.dtype(), "index_select", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("index_add", g.device(), outer * runs.distinct * inner,
                   IndexAddRows<T>{g.device_data<T>(), runs, gx.device_data<T>(), runs.n, mid, inner});
  });
}

void gather(const Tensor& x, int64_t d, const Tensor& index, const Tensor& out) {
  std::vector<int64_t> xs = contiguous_strides(x.shape());
  int64_t dim_stride = xs[d];
  xs[d] = 0;
  auto walk = kernel::strided_index<2>("gather", index.shape(), {xs, contiguous_strides(index.shape())});
  detail::dispatch_bytes(element_size(x.dtype()), [&](auto zero) {
    using U = decltype(zero);
    kernel::launch("gather", x.device(), index.numel(),
                   GatherKernel<U>{static_cast<const U*>(x.device_raw_data()), index.device_data<int64_t>(),
                                   static_cast<U*>(out.device_raw_data()), walk, dim_stride});
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
                                       index.shape()[d], after, x_fiber, xs[d]});
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
