// The JSON that safetensors headers need: a strict parser that rejects
// malformed or hostile input with qkv::Error (never crashes), and writing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::nn {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // written without fraction or exponent, and fits int64
  int64_t integer = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;  // in file order; keys are unique

  /// The member named `key`, or null when absent (objects only).
  const Json* find(std::string_view key) const;
};

/// Parses one JSON value spanning all of `text` (white space aside). Throws
/// qkv::Error naming the byte offset on any error, duplicate keys included.
Json parse_json(std::string_view text);

/// `text` as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

/// A double as text that reads back to the same value (17 significant digits).
std::string exact_number(double value);

/// A flat object of strings, e.g. {"width": "128"}.
std::string json_object(const std::map<std::string, std::string>& fields);
/// The inverse of json_object(): every value must be a string.
std::map<std::string, std::string> parse_json_object(std::string_view text);

}  // namespace qkv::nn
