// qkv::Error and the helpers every op uses to report bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace qkv {

/// Thrown for every user error (bad shape, dtype, index, file). The message
/// names the op or file and the shapes or values involved.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Concatenates anything printable into one string: cat("add: ", 3, "x").
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

}  // namespace qkv

/// Throws qkv::Error with the concatenated message when `cond` is false. A
/// macro, so the message (often built with shape_str) costs nothing unless
/// the check fails: checks sit on hot paths such as numel().
#define QKV_CHECK(cond, ...)                                     \
  do {                                                           \
    if (!(cond)) throw ::qkv::Error(::qkv::cat(__VA_ARGS__));    \
  } while (0)
