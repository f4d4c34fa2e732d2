// A text as a text model reads it: its bytes (a byte model's tokens are its
// bytes) or its ids from a BPE tokenizer (bpe.h). One type, so that the
// windows a step draws and the loss over them do not care which.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qkv::cli {

class TextTokens {
 public:
  TextTokens() = default;
  /// A byte model's text: each byte is a token.
  explicit TextTokens(std::string bytes) : bytes_(std::move(bytes)), is_bytes_(true) {}
  /// A BPE model's text: its ids (int32: a quarter of int64's memory for a text of up to 1 GiB).
  explicit TextTokens(std::vector<int32_t> ids) : ids_(std::move(ids)), is_bytes_(false) {}
  int64_t size() const { return is_bytes_ ? static_cast<int64_t>(bytes_.size()) : static_cast<int64_t>(ids_.size()); }
  int64_t operator[](int64_t i) const {
    return is_bytes_ ? static_cast<unsigned char>(bytes_[static_cast<size_t>(i)]) : ids_[static_cast<size_t>(i)];
  }
  /// Tokens [begin, end).
  TextTokens slice(int64_t begin, int64_t end) const {
    if (is_bytes_) return TextTokens(bytes_.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
    return TextTokens(std::vector<int32_t>(ids_.begin() + begin, ids_.begin() + end));
  }

 private:
  std::string bytes_;
  std::vector<int32_t> ids_;
  bool is_bytes_ = true;
};

}  // namespace qkv::cli
