// Internal: walks a contiguous output while reading operands through strides
// (0 on broadcast dims). Broadcasting binary ops, expand, permute and gather
// all reduce to this one loop. Adjacent dims that are contiguous for every
// operand are merged first, so the inner run is as long as possible.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "autograd/parallel.h"
#include "autograd/shape.h"

namespace qkv::detail {

template <int N> struct StridedLoop {
  int64_t total = 1;  // output elements
  int64_t inner = 1;  // length of the innermost merged dim
  std::array<int64_t, N> inner_stride{};
  Shape outer_shape;                                  // merged dims above the inner one
  std::vector<std::array<int64_t, N>> outer_strides;  // per outer dim, per operand

  /// `strides[k]` gives operand k's stride for each dim of `out_shape`.
  StridedLoop(const Shape& out_shape, const std::array<std::vector<int64_t>, N>& strides) {
    total = numel(out_shape);
    Shape sizes;
    std::vector<std::array<int64_t, N>> st;
    for (size_t d = 0; d < out_shape.size(); ++d) {
      if (out_shape[d] == 1) continue;
      std::array<int64_t, N> s;
      for (int k = 0; k < N; ++k) s[k] = strides[k][d];
      bool mergeable = !sizes.empty();
      for (int k = 0; k < N && mergeable; ++k) mergeable = st.back()[k] == s[k] * out_shape[d];
      if (mergeable) {
        sizes.back() *= out_shape[d];
        st.back() = s;
      } else {
        sizes.push_back(out_shape[d]);
        st.push_back(s);
      }
    }
    if (!sizes.empty()) {
      inner = sizes.back();
      inner_stride = st.back();
      sizes.pop_back();
      st.pop_back();
    }
    outer_shape = sizes;
    outer_strides = st;
  }

  /// Operand offsets of the first element of outer row `row`.
  std::array<int64_t, N> row_offsets(int64_t row) const {
    std::array<int64_t, N> off{};
    for (size_t d = outer_shape.size(); d-- > 0;) {
      int64_t i = row % outer_shape[d];
      row /= outer_shape[d];
      for (int k = 0; k < N; ++k) off[k] += i * outer_strides[d][k];
    }
    return off;
  }

  /// Calls run(out_offset, operand_offsets, length) for contiguous output
  /// segments; operand k advances by inner_stride[k] per element.
  template <class Fn> void for_each_segment(int64_t cost_per_element, Fn&& run,
                                            const std::source_location& where = std::source_location::current()) const {
    parallel_for(
        total, cost_per_element,
        [&](int64_t begin, int64_t end) {
          int64_t row = begin / inner, i = begin % inner;
          while (begin < end) {
            std::array<int64_t, N> off = row_offsets(row);
            for (int k = 0; k < N; ++k) off[k] += i * inner_stride[k];
            int64_t len = std::min(inner - i, end - begin);
            run(begin, off, len);
            begin += len;
            ++row;
            i = 0;
          }
        },
        where);
  }
};

/// Strides of a tensor of `shape` read as if broadcast to `out_shape`.
inline std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out_shape) {
  std::vector<int64_t> own = contiguous_strides(shape), out(out_shape.size(), 0);
  size_t lead = out_shape.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) out[lead + d] = shape[d] == 1 ? 0 : own[d];
  return out;
}

/// Calls fn(U{}) with an unsigned type as wide as one element, for copies
/// that do not care about the dtype.
template <class Fn> void dispatch_bytes(std::size_t width, Fn&& fn) {
  switch (width) {
    case 1: fn(uint8_t{}); break;
    case 4: fn(uint32_t{}); break;
    default: fn(uint64_t{}); break;
  }
}

}  // namespace qkv::detail
