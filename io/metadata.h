// Checkpoint metadata: flat {"key": "value"} objects as JSON text inside a
// safetensors header's string values, and numbers that read back exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace qkv::io {

/// A double as the shortest text that reads back to the same value
/// (subnormals included).
std::string exact_number(double value);
/// The inverse of exact_number(): the whole of `text` must be one finite
/// number. Throws qkv::Error naming `what` otherwise.
double parse_number(std::string_view text, std::string_view what);
/// The same rule without the error: false where `text` is not one finite number
/// (for a reader of millions of values that builds its message only for a bad one).
bool parse_finite(std::string_view text, double& out);

/// FNV-1a's start, and its hash of `text` continued from `hash`: a log's
/// digest in a checkpoint, the tag of a cut file name.
inline constexpr uint64_t kFnv1aStart = 14695981039346656037ULL;
inline uint64_t fnv1a(std::string_view text, uint64_t hash = kFnv1aStart) {
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
}

/// The whole of `text` as an int64 (std::stoll's syntax); false when it is
/// not one, out of range, or followed by anything. Callers say what was bad.
bool parse_integer(std::string_view text, int64_t& out);

/// A flat object of strings, e.g. {"width":"128"}. Throws qkv::Error when a
/// key or value is not valid UTF-8.
std::string json_object(const std::map<std::string, std::string>& fields);
/// The inverse of json_object(): strict JSON (nlohmann-json; repeated keys,
/// deep nesting and invalid UTF-8 refused), every value a string.
std::map<std::string, std::string> parse_json_object(std::string_view text);
/// The number fields of one flat JSON object (a JSON-lines log row), parsed
/// as strictly as a checkpoint header (depth, repeated keys, UTF-8); null and
/// other values are left out. Throws qkv::Error when `text` is no object.
std::map<std::string, double> parse_json_numbers(std::string_view text);
/// parse_json_object() of a checkpoint's metadata field `key`, which must be
/// there: its errors name the file and the field.
std::map<std::string, std::string> metadata_object(const std::map<std::string, std::string>& metadata,
                                                   const std::string& key, const std::string& path);

}  // namespace qkv::io
