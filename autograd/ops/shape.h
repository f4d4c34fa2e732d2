// Shape ops. reshape shares storage; every other op here makes a contiguous
// copy. Index tensors are int64, masks and conditions are bool.
#pragma once

#include <string>
#include <vector>

#include "autograd/shape.h"
#include "autograd/tensor.h"

namespace qkv {

/// Same data, new shape; one size may be -1 (inferred). Shares storage.
Tensor reshape(const Tensor& x, const Shape& shape);
inline Tensor view(const Tensor& x, const Shape& shape) { return reshape(x, shape); }
/// Inserts a size-1 dim at `dim` (in [-rank-1, rank]).
Tensor unsqueeze(const Tensor& x, int64_t dim);
/// Removes dim `dim` if its size is 1 (otherwise returns x, as torch does).
Tensor squeeze(const Tensor& x, int64_t dim);

/// Dims reordered: out.shape[i] = x.shape[perm[i]].
Tensor permute(const Tensor& x, const Dims& perm);
/// Swaps two dims.
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);

/// `length` entries of `dim` starting at `start` (torch.narrow; a negative
/// start counts from the end).
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
/// x[..., start:end, ...] along `dim` with Python's rules: negative indices
/// count from the end, out-of-range bounds are clamped.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);

/// Joins tensors along an existing dim; all other sizes must agree.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);
/// Joins same-shaped tensors along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

/// Broadcasts x to `shape` (NumPy rules; -1 keeps a size), as a copy.
Tensor expand(const Tensor& x, const Shape& shape);
inline Tensor broadcast_to(const Tensor& x, const Shape& shape) { return expand(x, shape); }

/// Picks entries `index` (1-D int64; a 0-d index is one entry, and `dim` keeps
/// size 1, as in torch) along `dim`; repeated indices are allowed
/// and their gradients add up (the embedding lookup). An index out of range
/// is a one-line error: at once on the CPU; on a device, at the next read
/// from it (its kernel finds it: autograd/device_faults.h).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// The words of an index's out-of-range error: prefix + the index + suffix.
struct IndexError {
  std::string prefix, suffix;
};
/// index_select whose out-of-range error reads `error`'s words, on the CPU
/// and on a device alike: a layer that looks up a table of its own names
/// itself in it ("Embedding(5, 3): id 6 out of range [0, 5)").
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const IndexError& error);
/// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (torch.gather): index is
/// int64 with x's rank and no larger than x outside `dim`. Indices out of
/// range: as index_select.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

/// Images [B, C, H, W] -> their p×p patches [B, (H/p)·(W/p), C·p·p]: patch
/// (i, j) is row i·(W/p) + j, flattened in (channel, row, column) order, the
/// layout of a Conv2d weight [out, C, p, p] (a ViT's patch embedding is a
/// Linear over these rows). H and W must be multiples of p.
Tensor patchify(const Tensor& x, int64_t patch);

/// `value` where mask is true, x elsewhere; mask (bool) and x broadcast.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// a where condition is true, b elsewhere; all three broadcast.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);

}  // namespace qkv
