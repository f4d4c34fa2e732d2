#include "autograd/shape.h"

#include <algorithm>

#include "autograd/error.h"

namespace qkv {

std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    QKV_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape_str(shape), " has more elements than int64 can count");
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

int64_t normalize_dim(const char* op, int64_t dim, int64_t rank) {
  // The range, as PyTorch says it: "rank" would mislead where it is the input's rank + 1 (unsqueeze, stack).
  QKV_CHECK(rank > 0, op, ": dim ", dim, " given for a tensor with no dimensions");
  QKV_CHECK(dim >= -rank && dim < rank, op, ": dim ", dim, " out of range [", -rank, ", ", rank - 1, "]");
  return dim < 0 ? dim + rank : dim;
}

void check_scalar_dim(const char* op, int64_t dim) {
  QKV_CHECK(dim == -1 || dim == 0, op, ": dim ", dim, " out of range [-1, 0] (a 0-d tensor)");
}

Dims normalize_dims(const char* op, const Dims& dims, int64_t rank) {
  Dims out;
  if (rank == 0) {
    for (int64_t d : dims) check_scalar_dim(op, d);
    return out;
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(op, d, rank));
  std::sort(out.begin(), out.end());
  QKV_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim listed twice");
  return out;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t sa = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t sb = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    QKV_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " do not broadcast");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace qkv
