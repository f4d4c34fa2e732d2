// Shapes, dims and NumPy broadcasting rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

using Shape = std::vector<int64_t>;  // sizes, outermost first
using Dims = std::vector<int64_t>;   // a list of dimensions (negative counts from the end)

/// "[2, 3, 4]"
std::string shape_str(const Shape& shape);

/// Number of elements (1 for a 0-d shape).
int64_t numel(const Shape& shape);

/// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);

/// Maps dim in [-rank, rank) to [0, rank); throws naming `op` otherwise.
int64_t normalize_dim(const char* op, int64_t dim, int64_t rank);

/// For ops that, as torch, take a dim of a 0-d tensor (reductions, softmax,
/// squeeze: the tensor as one element): throws unless dim is -1 or 0.
void check_scalar_dim(const char* op, int64_t dim);

/// Normalizes, sorts and de-duplicates a dim list; an empty list means all dims.
/// For a 0-d tensor (rank 0) the dims may be -1 or 0, and none are returned.
Dims normalize_dims(const char* op, const Dims& dims, int64_t rank);

/// The NumPy broadcast of two shapes; throws naming `op` when they don't broadcast.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

}  // namespace qkv
