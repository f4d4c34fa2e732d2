// Internal to io/ (no public header includes it): nlohmann-json with the
// checks safetensors headers need beyond the JSON grammar. Not for users.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace qkv::io::detail {

/// Deepest nesting accepted: safetensors headers need 3 levels.
inline constexpr int kMaxJsonDepth = 64;

/// Parses one JSON value spanning all of `text`, in time and memory linear
/// in its size. Throws qkv::Error (one line, with the byte offset where
/// nlohmann-json gives one) on malformed JSON, invalid UTF-8, a key repeated
/// within one object (the JSON grammar allows it; safetensors must not, or
/// two readers could see two different files), or nesting deeper than
/// kMaxJsonDepth.
nlohmann::json parse_strict_json(std::string_view text);

}  // namespace qkv::io::detail
