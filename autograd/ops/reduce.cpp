// Reductions: forward and backward side by side. The kernels reduce one
// contiguous block of dims, viewing x as [outer, reduced, inner]; other dim
// sets are first permuted to the end, so every reduction shares two kernels.
#include "autograd/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce_math.h"
#include "autograd/ops/shape.h"
#include "autograd/parallel.h"

namespace qkv {

QKV_DECLARE_OP(sum);
QKV_DECLARE_OP(mean);
QKV_DECLARE_OP(max);
QKV_DECLARE_OP(var);
QKV_DECLARE_OP(sum_to);
QKV_DECLARE_OP(masked_mean);

namespace {

struct Block {
  int64_t outer = 1, reduced = 1, inner = 1;
  Shape out_shape;  // x's shape without dims [first, last]
};

Block block_of(const Shape& shape, int64_t first, int64_t last) {
  Block b;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < first)
      b.outer *= shape[d];
    else if (d > last)
      b.inner *= shape[d];
    else
      b.reduced *= shape[d];
    if (d < first || d > last) b.out_shape.push_back(shape[d]);
  }
  return b;
}

constexpr int64_t kColumnChunk = 256;  // inner columns one work item accumulates

// Sum over the block: out[o, i] = Σ_r x[o, r, i], accumulated in double.
Tensor sum_block(const Tensor& x, int64_t first, int64_t last) {
  Block b = block_of(x.shape(), first, last);
  Tensor out = Tensor::empty(b.out_shape, x.dtype(), x.device());
  if (!x.device().is_cpu())
    device::sum_block(x, out, b.reduced, b.inner);
  else
    dispatch_floating(x.dtype(), "sum", [&](auto zero) {
      using T = decltype(zero);
      const T* px = x.data<T>();
      T* po = out.data<T>();
      if (b.inner == 1) {
        parallel_for(b.outer, b.reduced, [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            const T* row = px + o * b.reduced;
            double acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t r = 0; r < b.reduced; ++r) acc += row[r];
            po[o] = static_cast<T>(acc);
          }
        });
        return;
      }
      int64_t chunks = (b.inner + kColumnChunk - 1) / kColumnChunk;
      parallel_for(b.outer * chunks, b.reduced * std::min(b.inner, kColumnChunk), [&](int64_t begin, int64_t end) {
        double acc[kColumnChunk];
        for (int64_t item = begin; item < end; ++item) {
          int64_t o = item / chunks, i0 = item % chunks * kColumnChunk, n = std::min(kColumnChunk, b.inner - i0);
          std::fill(acc, acc + n, 0.0);
          for (int64_t r = 0; r < b.reduced; ++r) {
            const T* src = px + (o * b.reduced + r) * b.inner + i0;
            for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
          }
          for (int64_t i = 0; i < n; ++i) po[o * b.inner + i0 + i] = static_cast<T>(acc[i]);
        }
      });
    });
  // d sum = the gradient copied to every reduced position
  if (needs_grad({x}))
    record("sum", out, {x}, [b, shape = x.shape()](const Tensor& g) -> std::vector<Tensor> {
      return {reshape(expand(reshape(g, {b.outer, 1, b.inner}), {b.outer, b.reduced, b.inner}), shape)};
    });
  return out;
}

// Max over the block; remembers the arg-max (first on ties, NaN wins) for backward.
Tensor max_block(const Tensor& x, int64_t first, int64_t last) {
  Block b = block_of(x.shape(), first, last);
  QKV_CHECK(b.reduced > 0, "max: cannot reduce over zero elements (shape ", shape_str(x.shape()), ")");
  Tensor out = Tensor::empty(b.out_shape, x.dtype(), x.device());
  auto argmax = std::make_shared<std::vector<int64_t>>();
  Tensor device_argmax;
  if (!x.device().is_cpu()) {
    device_argmax = Tensor::empty(b.out_shape, DType::Int64, x.device());
    device::max_block(x, out, device_argmax, b.reduced, b.inner);
  } else {
    argmax->resize(b.outer * b.inner);
    dispatch_floating(x.dtype(), "max", [&](auto zero) {
      using T = decltype(zero);
      const T* px = x.data<T>();
      T* po = out.data<T>();
      const math::MaxColumn<T> column{px, po, argmax->data(), b.reduced, b.inner};  // as the device kernel
      parallel_for(b.outer * b.inner, b.reduced, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) column(item);
      });
    });
  }
  // d max = the gradient routed to the arg-max, zero elsewhere
  if (needs_grad({x}))
    record("max", out, {x}, [b, argmax, device_argmax, shape = x.shape()](const Tensor& g) -> std::vector<Tensor> {
      Tensor gx = Tensor::zeros(shape, g.dtype(), g.device());
      if (!g.device().is_cpu()) {
        device::max_block_backward(g, device_argmax, gx, b.reduced, b.inner);
        return {gx};
      }
      dispatch_floating(g.dtype(), "max", [&](auto zero) {
        using T = decltype(zero);
        const T* pg = g.data<T>();
        T* pgx = gx.data<T>();
        const math::MaxBackwardItem<T> route{pg, argmax->data(), pgx, b.reduced, b.inner};
        for (int64_t item = 0; item < b.outer * b.inner; ++item) route(item);
      });
      return {gx};
    });
  return out;
}

// Applies a block kernel to any dim set: permutes the reduced dims to the end
// when they are not adjacent, then restores size-1 dims for keepdim.
template <class BlockKernel>
Tensor reduce_dims(const char* op, const Tensor& x, const Dims& dims, bool keepdim, BlockKernel kernel) {
  int64_t rank = x.dim();
  Dims reduced = normalize_dims(op, dims, rank);
  Tensor out;
  if (reduced.empty()) {
    out = kernel(x, 0, -1);  // a 0-d tensor: nothing to reduce
  } else if (reduced.back() - reduced.front() + 1 == static_cast<int64_t>(reduced.size())) {
    out = kernel(x, reduced.front(), reduced.back());
  } else {
    Dims perm;
    for (int64_t d = 0; d < rank; ++d)
      if (!std::binary_search(reduced.begin(), reduced.end(), d)) perm.push_back(d);
    perm.insert(perm.end(), reduced.begin(), reduced.end());
    out = kernel(permute(x, perm), rank - static_cast<int64_t>(reduced.size()), rank - 1);
  }
  if (!keepdim) return out;
  Shape kept = x.shape();
  for (int64_t d : reduced) kept[d] = 1;
  return reshape(out, kept);
}

int64_t reduced_count(const char* op, const Tensor& x, const Dims& dims) {
  int64_t count = 1;
  for (int64_t d : normalize_dims(op, dims, x.dim())) count *= x.shape()[d];
  return count;
}

}  // namespace

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) { return reduce_dims("sum", x, dims, keepdim, sum_block); }

Tensor max(const Tensor& x, const Dims& dims, bool keepdim) { return reduce_dims("max", x, dims, keepdim, max_block); }

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  int64_t count = reduced_count("mean", x, dims);
  return mul(sum(x, dims, keepdim), 1.0 / static_cast<double>(count));  // over zero elements 0·∞: NaN, as torch
}

// Two passes (x - mean first) for accuracy. d var / dx = 2(x - mean)/(N - c), torch's formula: the path
// through the mean adds 2Σ(x - mean)·(-1/N)/(N - c) = 0, so the mean is detached (composed, that zero was
// inf - inf = NaN with no degrees of freedom left). N - c <= 0 divides by 0, as torch: NaN or inf.
Tensor var(const Tensor& x, const Dims& dims, bool keepdim, int64_t correction) {
  int64_t count = reduced_count("var", x, dims);
  Tensor centered = sub(x, mean(x, dims, true).detach());
  return div(sum(mul(centered, centered), dims, keepdim),
             static_cast<double>(std::max<int64_t>(count - correction, 0)));
}

// d x[b, t] = g[b] / lengths[b] for t < lengths[b], 0 for the padding.
Tensor masked_mean(const Tensor& x, const Tensor& lengths) {
  common_device("masked_mean", {x, lengths});
  QKV_CHECK(x.dim() >= 2, "masked_mean: x must be [B, T, ...], got ", shape_str(x.shape()));
  QKV_CHECK(lengths.dtype() == DType::Int64 && lengths.dim() == 1 && lengths.size(0) == x.size(0),
            "masked_mean: lengths must be int64 [", x.size(0), "], got ", dtype_name(lengths.dtype()), " ",
            shape_str(lengths.shape()));
  const int64_t B = x.size(0), T = x.size(1), inner = x.numel() / std::max<int64_t>(1, B * T);
  Tensor host_lengths = lengths.to(Device::cpu());  // checked on the host
  std::vector<int64_t> n(host_lengths.data<int64_t>(), host_lengths.data<int64_t>() + B);
  for (int64_t b = 0; b < B; ++b)
    QKV_CHECK(n[b] >= 1 && n[b] <= T, "masked_mean: length ", n[b], " of row ", b, " is not in [1, ", T, "]");
  Shape shape = x.shape();
  shape.erase(shape.begin() + 1);
  Tensor out = Tensor::zeros(shape, x.dtype(), x.device());
  if (!x.device().is_cpu())
    device::masked_mean(x, lengths, out);
  else
    dispatch_floating(x.dtype(), "masked_mean", [&](auto zero) {
      using F = decltype(zero);
      const F* px = x.data<F>();
      F* po = out.data<F>();
      const math::MaskedMeanItem<F> mean_of{px, n.data(), po, T, inner};  // as the device kernel
      for (int64_t item = 0; item < B * inner; ++item) mean_of(item);
    });
  if (needs_grad({x}))
    record("masked_mean", out, {x},
           [n, lengths = x.device().is_cpu() ? Tensor() : lengths.to(DType::Int64), xs = x.shape(), T,
            inner](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::zeros(xs, g.dtype(), g.device());
             if (!g.device().is_cpu()) {
               device::masked_mean_backward(g, lengths, gx);
               return {gx};
             }
             dispatch_floating(g.dtype(), "masked_mean", [&](auto zero) {
               using F = decltype(zero);
               const F* pg = g.data<F>();
               F* pgx = gx.data<F>();
               const math::MaskedMeanBackwardItem<F> spread{pg, n.data(), pgx, T, inner};
               for (int64_t item = 0, count = gx.numel(); item < count; ++item) spread(item);
             });
             return {gx};
           });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  QKV_CHECK(shape.size() <= x.shape().size() && broadcast_shapes("sum_to", shape, x.shape()) == x.shape(),
            "sum_to: ", shape_str(x.shape()), " is not a broadcast of ", shape_str(shape));
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  Dims dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) dims.push_back(d);
  return reshape(dims.empty() ? x : sum(x, dims, true), shape);
}

}  // namespace qkv
