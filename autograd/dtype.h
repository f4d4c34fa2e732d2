// Element types. float32 trains, float64 checks gradients; int64 (indices)
// and bool (masks) are data-only: no op differentiates through them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "autograd/error.h"

namespace qkv {

enum class DType { Float32, Float64, Int64, Bool };

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

inline std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

inline bool is_floating(DType dtype) { return dtype == DType::Float32 || dtype == DType::Float64; }

/// The DType of a C++ element type: dtype_of<float>() == DType::Float32.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

/// Calls `fn(T{})` with T = float or double for a floating dtype, so a kernel
/// template is instantiated once per dtype and chosen once per op call.
template <class Fn> decltype(auto) dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    default: break;
  }
  throw Error(cat(op, ": expects a float32 or float64 tensor, got ", dtype_name(dtype)));
}

}  // namespace qkv
