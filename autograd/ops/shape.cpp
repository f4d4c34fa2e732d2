// Shape ops: forward and backward side by side. Copies work on raw element
// bytes, so they serve every dtype (masks and indices included).
#include "autograd/ops/shape.h"

#include <algorithm>
#include <cstring>

#include "autograd/engine.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/strided_loop.h"

namespace qkv {

QKV_DECLARE_OP(reshape);
QKV_DECLARE_OP(unsqueeze);
QKV_DECLARE_OP(squeeze);
QKV_DECLARE_OP(permute);
QKV_DECLARE_OP(transpose);
QKV_DECLARE_OP(narrow);
QKV_DECLARE_OP(slice);
QKV_DECLARE_OP(concat);
QKV_DECLARE_OP(stack);
QKV_DECLARE_OP(expand);
QKV_DECLARE_OP(index_select);
QKV_DECLARE_OP(gather);
QKV_DECLARE_OP(masked_fill);
QKV_DECLARE_OP(where);
QKV_DECLARE_OP(patchify);

namespace {

// out[i] = src[offset through strides]; strides are src's, per dim of out.
void strided_copy(const Tensor& src, const Tensor& out, const std::vector<int64_t>& strides) {
  if (!src.device().is_cpu()) return device::strided_copy(src, out, strides);
  detail::StridedLoop<1> loop(out.shape(), {strides});
  detail::dispatch_bytes(element_size(src.dtype()), [&](auto zero) {
    using U = decltype(zero);
    const U* ps = static_cast<const U*>(src.raw_data());
    U* po = static_cast<U*>(out.raw_data());
    loop.for_each_segment(1, [&](int64_t o, std::array<int64_t, 1> off, int64_t len) {
      int64_t stride = loop.inner_stride[0];
      if (stride == 1)
        std::memcpy(po + o, ps + off[0], len * sizeof(U));
      else
        for (int64_t i = 0; i < len; ++i) po[o + i] = ps[off[0] + i * stride];
    });
  });
}

// Views a shape as [outer, shape[dim], inner].
struct Split {
  int64_t outer = 1, mid = 1, inner = 1;
};
Split split_at(const Shape& shape, int64_t dim) {
  Split s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim)
      s.outer *= shape[d];
    else if (d == dim)
      s.mid = shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

// dst[o, dst_start + j, :] = src[o, src_start + j, :] for j < len.
void copy_rows(const Tensor& src, int64_t src_mid, int64_t src_start, const Tensor& dst, int64_t dst_mid,
               int64_t dst_start, int64_t outer, int64_t len, int64_t inner) {
  if (!src.device().is_cpu())
    return device::copy_rows(src, src_mid, src_start, dst, dst_mid, dst_start, outer, len, inner);
  std::size_t width = element_size(src.dtype());
  const char* ps = static_cast<const char*>(src.raw_data());
  char* pd = static_cast<char*>(dst.raw_data());
  // In pieces, so that one large block (outer = 1: a split along dim 0) is shared by the threads too.
  parallel_for_pieces(outer, len * inner * static_cast<int64_t>(width), [&](int64_t o, int64_t at, int64_t n) {
    std::memcpy(pd + ((o * dst_mid + dst_start) * inner) * width + at,
                ps + ((o * src_mid + src_start) * inner) * width + at, n);
  });
}

// out[o, j, :] = x[o, idx[j], :], a row copy per item.
void index_select_rows(const Tensor& x, const int64_t* idx, int64_t n, const Tensor& out, const Split& s) {
  std::size_t width = element_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  parallel_for(s.outer * n, s.inner, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t o = item / n, j = item % n;
      std::memcpy(po + item * s.inner * width, px + (o * s.mid + idx[j]) * s.inner * width, s.inner * width);
    }
  });
}

// sum += index_select's gradient, row by row: each selected row's gradients added up in index order from 0,
// then into the sum, as add(sum, zeros + each row in turn) would (a row not selected is left as it is: x + 0).
void add_selected_rows(const Tensor& g, const int64_t* idx, int64_t n, const Split& s, const Tensor& sum) {
  std::vector<int64_t> order(n);  // the picks in index order, each row's in the order they came
  for (int64_t j = 0; j < n; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [idx](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  dispatch_floating(g.dtype(), "index_select", [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> row(s.inner);
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t first = 0, last; first < n; first = last) {
        for (last = first + 1; last < n && idx[order[last]] == idx[order[first]];) ++last;
        std::fill(row.begin(), row.end(), T(0));
        for (int64_t k = first; k < last; ++k) {
          const T* src = g.data<T>() + (o * n + order[k]) * s.inner;
          for (int64_t i = 0; i < s.inner; ++i) row[i] += src[i];
        }
        T* dst = sum.data<T>() + (o * s.mid + idx[order[first]]) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) dst[i] += row[i];
      }
  });
}

void check_index_tensor(const char* op, const Tensor& index) {
  QKV_CHECK(index.dtype() == DType::Int64, op, ": index must be int64, got ", dtype_name(index.dtype()), " ",
            shape_str(index.shape()));
}

}  // namespace

// ---- reshape family: metadata only ----

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape target = shape;
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < target.size(); ++d) {
    if (target[d] == -1) {
      QKV_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = static_cast<int64_t>(d);
    } else {
      QKV_CHECK(target[d] >= 0 && !__builtin_mul_overflow(known, target[d], &known), "reshape: bad size in ",
                shape_str(shape));
    }
  }
  if (infer >= 0) {
    QKV_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot view ", shape_str(x.shape()), " as ",
              shape_str(shape));
    target[infer] = x.numel() / known;
  }
  QKV_CHECK(numel(target) == x.numel(), "reshape: cannot view ", shape_str(x.shape()), " (", x.numel(),
            " elements) as ", shape_str(shape));
  Tensor out = alias_with_shape(x, target);
  if (needs_grad({x}))
    record("reshape", out, {x}, [s = x.shape()](const Tensor& g) -> std::vector<Tensor> { return {reshape(g, s)}; });
  return out;
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int64_t d = normalize_dim("unsqueeze", dim, x.dim() + 1);
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return check_scalar_dim("squeeze", dim), x;
  int64_t d = normalize_dim("squeeze", dim, x.dim());
  if (x.shape()[d] != 1) return x;  // as torch: squeezing a dim that is not 1 changes nothing
  Shape shape = x.shape();
  shape.erase(shape.begin() + d);
  return reshape(x, shape);
}

// ---- permute: d permute(x, p) = permute(g, p⁻¹) ----

Tensor permute(const Tensor& x, const Dims& perm) {
  int64_t rank = x.dim();
  QKV_CHECK(static_cast<int64_t>(perm.size()) == rank, "permute: ", perm.size(), " dims given for a tensor of shape ",
            shape_str(x.shape()));
  Dims p(rank), inverse(rank, -1);
  for (int64_t i = 0; i < rank; ++i) {
    p[i] = normalize_dim("permute", perm[i], rank);
    QKV_CHECK(inverse[p[i]] < 0, "permute: dim ", perm[i], " repeated");
    inverse[p[i]] = i;
  }
  Shape shape(rank);
  std::vector<int64_t> own = contiguous_strides(x.shape()), strides(rank);
  for (int64_t i = 0; i < rank; ++i) {
    shape[i] = x.shape()[p[i]];
    strides[i] = own[p[i]];
  }
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  strided_copy(x, out, strides);
  if (needs_grad({x}))
    record("permute", out, {x}, [inverse](const Tensor& g) -> std::vector<Tensor> { return {permute(g, inverse)}; });
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  int64_t a = normalize_dim("transpose", dim0, x.dim()), b = normalize_dim("transpose", dim1, x.dim());
  Dims perm(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return permute(x, perm);
}

// ---- narrow / slice: the gradient lands in the narrowed window, zero elsewhere ----

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  int64_t d = normalize_dim("narrow", dim, x.dim());
  int64_t size = x.shape()[d];
  if (start < 0 && start >= -size) start += size;  // torch.narrow counts a negative start from the end
  QKV_CHECK(start >= 0 && start <= size && length >= 0 && length <= size - start, "narrow: window of ", length,
            " from ", start, " out of range for dim ", dim, " of ", shape_str(x.shape()));
  Split s = split_at(x.shape(), d);
  Shape shape = x.shape();
  shape[d] = length;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  copy_rows(x, s.mid, start, out, length, 0, s.outer, length, s.inner);
  if (needs_grad({x}))
    record("narrow", out, {x}, [s, start, length, xs = x.shape()](const Tensor& g) -> std::vector<Tensor> {
      Tensor gx = Tensor::zeros(xs, g.dtype(), g.device());
      copy_rows(g, length, 0, gx, s.mid, start, s.outer, length, s.inner);
      return {gx};
    });
  return out;
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  int64_t size = x.shape()[normalize_dim("slice", dim, x.dim())];
  auto clamp = [size](int64_t i) { return std::clamp(i < 0 ? i + size : i, int64_t{0}, size); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  return narrow(x, dim, start, end - start);
}

// ---- concat / stack: each input's gradient is its window of g ----

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  QKV_CHECK(!tensors.empty(), "concat: no tensors given");
  const Tensor& first = tensors[0];
  for (const Tensor& t : tensors) common_device("concat", {first, t});
  int64_t d = normalize_dim("concat", dim, first.dim());
  Shape shape = first.shape();
  shape[d] = 0;
  for (const Tensor& t : tensors) {
    bool same = t.dim() == first.dim() && t.dtype() == first.dtype();
    for (int64_t i = 0; same && i < first.dim(); ++i) same = i == d || t.shape()[i] == first.shape()[i];
    QKV_CHECK(same, "concat: along dim ", dim, " shapes ", shape_str(first.shape()), " ", dtype_name(first.dtype()),
              " and ", shape_str(t.shape()), " ", dtype_name(t.dtype()), " do not fit");
    shape[d] += t.shape()[d];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  Split s = split_at(shape, d);
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    copy_rows(t, t.shape()[d], 0, out, s.mid, offset, s.outer, t.shape()[d], s.inner);
    offsets.push_back(offset);
    offset += t.shape()[d];
  }
  if (needs_grad(tensors)) {
    std::vector<bool> wants;
    std::vector<int64_t> sizes;
    for (const Tensor& t : tensors) {
      wants.push_back(t.requires_grad());
      sizes.push_back(t.shape()[d]);
    }
    record("concat", out, tensors, [d, offsets, wants, sizes](const Tensor& g) -> std::vector<Tensor> {
      std::vector<Tensor> grads;
      for (size_t k = 0; k < offsets.size(); ++k)
        grads.push_back(wants[k] ? narrow(g, d, offsets[k], sizes[k]) : Tensor());
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  QKV_CHECK(!tensors.empty(), "stack: no tensors given");
  int64_t d = normalize_dim("stack", dim, tensors[0].dim() + 1);
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) {
    QKV_CHECK(t.shape() == tensors[0].shape(), "stack: shapes ", shape_str(tensors[0].shape()), " and ",
              shape_str(t.shape()), " differ");
    expanded.push_back(unsqueeze(t, d));
  }
  return concat(expanded, d);
}

// ---- expand: d expand(x) = sum_to(g, x.shape) ----

Tensor expand(const Tensor& x, const Shape& shape) {
  QKV_CHECK(shape.size() >= x.shape().size(), "expand: cannot expand ", shape_str(x.shape()), " to fewer dims ",
            shape_str(shape));
  size_t lead = shape.size() - x.shape().size();
  Shape target = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t own = d < lead ? 1 : x.shape()[d - lead];
    if (target[d] == -1 && d >= lead) target[d] = own;
    QKV_CHECK(target[d] >= 0 && (own == target[d] || own == 1), "expand: cannot expand ", shape_str(x.shape()), " to ",
              shape_str(shape));
  }
  Tensor out = Tensor::empty(target, x.dtype(), x.device());
  strided_copy(x, out, detail::broadcast_strides(x.shape(), target));
  if (needs_grad({x}))
    record("expand", out, {x}, [xs = x.shape()](const Tensor& g) -> std::vector<Tensor> { return {sum_to(g, xs)}; });
  return out;
}

// ---- index_select / gather: the backward scatters g back, adding on repeats ----

namespace {
// index_select with its error's words: `words`, or index_select's own (built
// only when needed: every embedding lookup comes through here).
Tensor index_select_worded(const Tensor& x, int64_t dim, const Tensor& index, const IndexError* words) {
  common_device("index_select", {x, index});
  check_index_tensor("index_select", index);
  QKV_CHECK(index.dim() <= 1, "index_select: index must be 1-D (or 0-d), got ", shape_str(index.shape()));
  int64_t d = normalize_dim("index_select", dim, x.dim());
  Split s = split_at(x.shape(), d);
  int64_t n = index.numel();
  Shape shape = x.shape();
  shape[d] = n;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  auto prefix = [&] { return words ? words->prefix : std::string("index_select: index "); };
  auto suffix = [&] {
    return words ? words->suffix : cat(" out of range for dim ", dim, " of ", shape_str(x.shape()));
  };
  if (!x.device().is_cpu()) {  // checked by the kernel, raised at the next read (autograd/device_faults.h)
    device::index_select(x, index, out, s.outer, s.mid, s.inner, expect_valid(x.device(), prefix(), suffix()));
  } else {
    const int64_t* idx = index.data<int64_t>();
    for (int64_t j = 0; j < n; ++j)
      if (idx[j] < 0 || idx[j] >= s.mid) throw Error(cat(prefix(), idx[j], suffix()));
    index_select_rows(x, idx, n, out, s);
  }
  if (needs_grad({x}))
    record("index_select", out, {x},
           [s, index = index.to(DType::Int64), n, xs = x.shape()](const Tensor& g) -> std::vector<Tensor> {
             if (!g.device().is_cpu()) {  // every element of gx written: no zeros first
               Tensor gx = Tensor::empty(xs, g.dtype(), g.device());
               device::index_select_backward(g, index, gx, s.outer, s.mid, s.inner);
               return {gx};
             }
             Tensor gx = Tensor::zeros(xs, g.dtype(), g.device());
             dispatch_floating(g.dtype(), "index_select", [&](auto zero) {
               using T = decltype(zero);
               const int64_t* idx = index.data<int64_t>();
               const T* pg = g.data<T>();
               T* pgx = gx.data<T>();
               for (int64_t o = 0; o < s.outer; ++o)
                 for (int64_t j = 0; j < n; ++j) {
                   T* dst = pgx + (o * s.mid + idx[j]) * s.inner;
                   const T* src = pg + (o * n + j) * s.inner;
                   for (int64_t i = 0; i < s.inner; ++i) dst[i] += src[i];
                 }
             });
             return {gx};
           });
  if (needs_grad({x}) && x.device().is_cpu())
    record_add_into(out, [s, index = index.to(DType::Int64), n](const Tensor& g, const Tensor& sum) {
      add_selected_rows(g, index.data<int64_t>(), n, s, sum);
    });
  return out;
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return index_select_worded(x, dim, index, nullptr);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const IndexError& error) {
  return index_select_worded(x, dim, index, &error);
}

namespace {
// The walk gather and its backward share: for each index element, the offset
// of the x element it names. x's stride along dim is replaced by the index.
template <class Fn> void for_each_gathered(const Tensor& x, int64_t d, const Tensor& index, Fn&& fn) {
  std::vector<int64_t> xs = contiguous_strides(x.shape());
  int64_t dim_stride = xs[d];
  xs[d] = 0;
  detail::StridedLoop<2> loop(index.shape(), {xs, contiguous_strides(index.shape())});
  const int64_t* idx = index.data<int64_t>();
  for (int64_t row = 0, o = 0; o < loop.total; ++row) {
    std::array<int64_t, 2> off = loop.row_offsets(row);
    for (int64_t i = 0; i < loop.inner; ++i, ++o)
      fn(o, off[0] + i * loop.inner_stride[0] + idx[off[1] + i * loop.inner_stride[1]] * dim_stride);
  }
}
}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  common_device("gather", {x, index});
  check_index_tensor("gather", index);
  int64_t d = normalize_dim("gather", dim, x.dim());
  bool fits = index.dim() == x.dim();
  for (int64_t i = 0; fits && i < x.dim(); ++i) fits = i == d || index.shape()[i] <= x.shape()[i];
  QKV_CHECK(fits, "gather: index ", shape_str(index.shape()), " does not fit x ", shape_str(x.shape()), " along dim ",
            dim);
  auto suffix = [&] { return cat(" out of range for dim ", dim, " of ", shape_str(x.shape())); };  // when needed
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  if (!x.device().is_cpu()) {  // checked by the kernel, raised at the next read (autograd/device_faults.h)
    device::gather(x, d, index, out, expect_valid(x.device(), "gather: index ", suffix()));
  } else {
    const int64_t* idx = index.data<int64_t>();
    for (int64_t i = 0, n = index.numel(); i < n; ++i)
      if (idx[i] < 0 || idx[i] >= x.shape()[d]) throw Error(cat("gather: index ", idx[i], suffix()));
    detail::dispatch_bytes(element_size(x.dtype()), [&](auto zero) {
      using U = decltype(zero);
      const U* px = static_cast<const U*>(x.raw_data());
      U* po = static_cast<U*>(out.raw_data());
      for_each_gathered(x, d, index, [&](int64_t o, int64_t src) { po[o] = px[src]; });
    });
  }
  if (needs_grad({x}))
    // index.to() is a private copy: the caller may reuse its index buffer before backward.
    record("gather", out, {x},
           [d, index = index.to(DType::Int64), x = x.detach()](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::zeros(x.shape(), g.dtype(), g.device());
             if (!g.device().is_cpu()) {
               device::scatter_add(g, d, index, gx);
               return {gx};
             }
             dispatch_floating(g.dtype(), "gather", [&](auto zero) {
               using T = decltype(zero);
               const T* pg = g.data<T>();
               T* pgx = gx.data<T>();
               for_each_gathered(x, d, index, [&](int64_t o, int64_t dst) { pgx[dst] += pg[o]; });
             });
             return {gx};
           });
  return out;
}

// ---- patchify: a permutation of the elements, so d x = g moved back ----

namespace {
// Calls fn(out_offset, x_offset) for every element of patchify(x [B, C, H, W], p).
template <class Fn> void for_each_patch_element(const Shape& s, int64_t p, Fn&& fn) {
  const int64_t B = s[0], C = s[1], H = s[2], W = s[3], rows = H / p, cols = W / p;
  int64_t o = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t u = 0; u < p; ++u)
            for (int64_t v = 0; v < p; ++v) fn(o++, ((b * C + c) * H + i * p + u) * W + j * p + v);
}
}  // namespace

Tensor patchify(const Tensor& x, int64_t patch) {
  QKV_CHECK(x.dim() == 4, "patchify: images must be [B, C, H, W], got ", shape_str(x.shape()));
  QKV_CHECK(patch > 0 && x.size(2) % patch == 0 && x.size(3) % patch == 0, "patchify: patch ", patch,
            " does not tile images of ", x.size(2), " x ", x.size(3));
  const Shape s = x.shape();
  const int64_t p = patch, rows = s[2] / p, cols = s[3] / p;
  Shape out_shape = {s[0], rows * cols, s[1] * p * p};
  Tensor out;
  if (!x.device().is_cpu()) {  // x as [B, C, rows, p, cols, p] read as [B, rows, cols, C, p, p]
    out = Tensor::empty({s[0], rows, cols, s[1], p, p}, x.dtype(), x.device());
    strided_copy(x, out, {s[1] * s[2] * s[3], p * s[3], p, s[2] * s[3], s[3], 1});
    out = alias_with_shape(out, out_shape);
  } else {
    out = Tensor::empty(out_shape, x.dtype());
    detail::dispatch_bytes(element_size(x.dtype()), [&](auto zero) {
      using U = decltype(zero);
      const U* px = static_cast<const U*>(x.raw_data());
      U* po = static_cast<U*>(out.raw_data());
      for_each_patch_element(s, patch, [&](int64_t o, int64_t src) { po[o] = px[src]; });
    });
  }
  if (needs_grad({x}))
    record("patchify", out, {x}, [s, p, rows, cols](const Tensor& g) -> std::vector<Tensor> {
      if (!g.device().is_cpu()) {  // g as [B, rows, cols, C, p, p] read as [B, C, rows, p, cols, p]
        Tensor gx = Tensor::empty({s[0], s[1], rows, p, cols, p}, g.dtype(), g.device());
        strided_copy(g, gx, {rows * cols * s[1] * p * p, p * p, cols * s[1] * p * p, p, s[1] * p * p, 1});
        return {alias_with_shape(gx, s)};
      }
      Tensor gx = Tensor::empty(s, g.dtype());
      dispatch_floating(g.dtype(), "patchify", [&](auto zero) {
        using T = decltype(zero);
        const T* pg = g.data<T>();
        T* pgx = gx.data<T>();
        for_each_patch_element(s, p, [&](int64_t o, int64_t dst) { pgx[dst] = pg[o]; });
      });
      return {gx};
    });
  return out;
}

// ---- masked_fill / where: the gradient follows the branch that was taken ----

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  common_device("masked_fill", {x, mask});
  QKV_CHECK(mask.dtype() == DType::Bool, "masked_fill: mask must be bool, got ", dtype_name(mask.dtype()), " ",
            shape_str(mask.shape()));
  Shape shape = broadcast_shapes("masked_fill", x.shape(), mask.shape());
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  if (!x.device().is_cpu())
    device::masked_fill(x, mask, value, out);
  else
    dispatch_floating(x.dtype(), "masked_fill", [&](auto zero) {
      using T = decltype(zero);
      const T* px = x.data<T>();
      const bool* pm = mask.data<bool>();
      T* po = out.data<T>();
      T fill = static_cast<T>(value);
      detail::StridedLoop<2> loop(
          shape, {detail::broadcast_strides(x.shape(), shape), detail::broadcast_strides(mask.shape(), shape)});
      loop.for_each_segment(1, [&](int64_t o, std::array<int64_t, 2> off, int64_t len) {
        for (int64_t i = 0; i < len; ++i)
          po[o + i] = pm[off[1] + i * loop.inner_stride[1]] ? fill : px[off[0] + i * loop.inner_stride[0]];
      });
    });
  if (needs_grad({x}))
    record("masked_fill", out, {x},
           [mask, xs = x.shape()](const Tensor& g) -> std::vector<Tensor> {
             return {sum_to(masked_fill(g, mask, 0.0), xs)};
           },
           {mask});
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  common_device("where", {condition, a, b});
  QKV_CHECK(condition.dtype() == DType::Bool, "where: condition must be bool, got ", dtype_name(condition.dtype()));
  QKV_CHECK(a.dtype() == b.dtype(), "where: dtypes differ: ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  Shape shape = broadcast_shapes("where", broadcast_shapes("where", condition.shape(), a.shape()), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  if (!a.device().is_cpu())
    device::where(condition, a, b, out);
  else
    dispatch_floating(a.dtype(), "where", [&](auto zero) {
      using T = decltype(zero);
      const bool* pc = condition.data<bool>();
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      T* po = out.data<T>();
      detail::StridedLoop<3> loop(
          shape, {detail::broadcast_strides(condition.shape(), shape), detail::broadcast_strides(a.shape(), shape),
                  detail::broadcast_strides(b.shape(), shape)});
      auto st = loop.inner_stride;
      loop.for_each_segment(1, [&](int64_t o, std::array<int64_t, 3> off, int64_t len) {
        for (int64_t i = 0; i < len; ++i)
          po[o + i] = pc[off[0] + i * st[0]] ? pa[off[1] + i * st[1]] : pb[off[2] + i * st[2]];
      });
    });
  if (needs_grad({a, b}))
    record("where", out, {a, b},
           [condition, sa = a.shape(), sb = b.shape(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             Tensor zero = Tensor::zeros({}, g.dtype(), g.device());
             return {ra ? sum_to(where(condition, g, zero), sa) : Tensor(),
                     rb ? sum_to(where(condition, zero, g), sb) : Tensor()};
           },
           {condition});
  return out;
}

}  // namespace qkv
