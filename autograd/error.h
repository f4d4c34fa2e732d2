// qkv::Error and the helpers every op uses to report bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace qkv {

/// Thrown for every user error (bad shape, dtype, index, file). The message
/// names the op or file and the shapes or values involved.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Concatenates anything printable into one string: cat("add: ", 3, "x").
template <class... Parts> std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

/// `text` with its control bytes (escapes, DEL; newlines and tabs too unless
/// `keep_lines`) written as \xNN and nothing else changed: printable() text
/// passes through unchanged, so the last printer before a terminal can apply
/// it to whole messages or to generated text.
inline std::string escape_control_bytes(std::string_view text, bool keep_lines = false) {
  std::string out;
  const char* digits = "0123456789abcdef";
  for (unsigned char c : text) {
    if ((c < 0x20 && !(keep_lines && (c == '\n' || c == '\t'))) || c == 0x7f) {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

/// A whole message for one line: escape_control_bytes() of at most `limit` bytes.
inline std::string one_line(std::string_view text, size_t limit = 4000) {
  return escape_control_bytes(text.substr(0, limit)) + (text.size() > limit ? "..." : "");
}

/// Untrusted text (from a file, a checkpoint, a prompt) made safe to print in
/// a one-line message: control bytes, backslashes and bytes that are not
/// valid UTF-8 become escapes (\n, \\, \x1b), so a string cannot forge
/// lines or reach the terminal as escape sequences; past `limit` bytes it is
/// cut and says how long it was.
inline std::string printable(std::string_view text, size_t limit = 200) {
  std::string out;
  auto hex = [&out](unsigned char c) {
    const char* digits = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  size_t i = 0;
  for (; i < text.size() && i < limit;) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\')
      out += "\\\\", ++i;
    else if (c == '\n')
      out += "\\n", ++i;
    else if (c == '\t')
      out += "\\t", ++i;
    else if (c < 0x20 || c == 0x7f)
      hex(c), ++i;
    else if (c < 0x80)
      out += static_cast<char>(c), ++i;
    else {  // a UTF-8 sequence: lead byte, then 1-3 continuation bytes; shortest form, no surrogates, <= U+10FFFF
      size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      bool ok = n > 0 && i + n <= text.size();
      for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (ok && n >= 3) {
        unsigned char c1 = static_cast<unsigned char>(text[i + 1]);
        ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
             !(c == 0xf4 && c1 >= 0x90);
      }
      if (ok)
        out.append(text.substr(i, n)), i += n;
      else
        hex(c), ++i;
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace qkv

/// Throws qkv::Error with the concatenated message when `cond` is false. A
/// macro, so the message (often built with shape_str) costs nothing unless
/// the check fails: checks sit on hot paths such as numel().
#define QKV_CHECK(cond, ...)                                  \
  do {                                                        \
    if (!(cond)) throw ::qkv::Error(::qkv::cat(__VA_ARGS__)); \
  } while (0)
