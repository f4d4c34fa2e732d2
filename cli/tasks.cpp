#include "tasks.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/error.h"
#include "bounds.h"
#include "nn/checkpoint.h"

namespace qkv::cli {

SequenceTask::SequenceTask(const std::string& name, int64_t max_len, int64_t digits)
    : name_(name), symbols_("0123456789+"), max_len_(max_len), digits_(digits) {
  QKV_CHECK(name == "copy" || name == "reverse" || name == "sort" || name == "add", "unknown task '", printable(name),
            "' (copy, reverse, sort, add, text)");
  check_range("max-len", max_len, 1, kMaxInputLength);
  check_range("digits", digits, 1, kMaxDigits);
}

int64_t SequenceTask::max_input() const { return name_ == "add" ? 2 * digits_ + 1 : max_len_; }
int64_t SequenceTask::max_answer() const { return name_ == "add" ? digits_ + 1 : max_len_; }

Example SequenceTask::sample(Generator& gen) const {
  Example e;
  if (name_ == "add") {
    int64_t limit = 1;
    for (int64_t i = 0; i < digits_; ++i) limit *= 10;
    auto number = [&](int64_t value) {  // zero-padded to `digits`, so digit i always sits at the same place
      std::string text = std::to_string(value);
      text.insert(0, digits_ - static_cast<int64_t>(text.size()), '0');
      for (char c : text) e.input.push_back(3 + (c - '0'));
    };
    number(static_cast<int64_t>(gen.below(limit)));
    e.input.push_back(3 + 10);  // '+'
    number(static_cast<int64_t>(gen.below(limit)));
  } else {
    int64_t n = 1 + static_cast<int64_t>(gen.below(max_len_));
    for (int64_t i = 0; i < n; ++i) e.input.push_back(3 + static_cast<int64_t>(gen.below(10)));
  }
  e.answer = solve(e.input);
  return e;
}

std::vector<int64_t> SequenceTask::solve(const std::vector<int64_t>& input) const {
  std::vector<int64_t> out = input;
  if (name_ == "reverse") std::reverse(out.begin(), out.end());
  if (name_ == "sort") std::sort(out.begin(), out.end());
  if (name_ == "add") {
    // Digits of the sum, least significant first: the order a carry flows.
    auto plus = std::find(input.begin(), input.end(), 3 + 10);
    std::string a, b;
    for (auto it = input.begin(); it != plus; ++it) a += static_cast<char>('0' + (*it - 3));
    for (auto it = plus + (plus != input.end()); it != input.end(); ++it) b += static_cast<char>('0' + (*it - 3));
    out.clear();
    int carry = 0;
    for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
      int d = carry + (i < a.size() ? a[a.size() - 1 - i] - '0' : 0) + (i < b.size() ? b[b.size() - 1 - i] - '0' : 0);
      out.push_back(3 + d % 10);
      carry = d / 10;
    }
    if (out.empty()) out.push_back(3);
  }
  return out;
}

std::vector<int64_t> SequenceTask::encode(const std::string& text) const {
  std::vector<int64_t> out;
  for (char c : text) {
    if (c == ' ') continue;
    size_t at = symbols_.find(c);
    bool allowed = at != std::string::npos && (name_ == "add" || c != '+');
    QKV_CHECK(allowed, "prompt '", printable(text), "' has '", printable(std::string(1, c)), "', which is not in the ",
              name_, " task's alphabet (", name_ == "add" ? "digits and +" : "digits", ")");
    out.push_back(3 + static_cast<int64_t>(at));
  }
  QKV_CHECK(!out.empty(), "empty prompt");
  if (name_ == "add") {
    size_t plus = std::count(out.begin(), out.end(), 3 + 10);
    QKV_CHECK(plus == 1 && out.front() != 13 && out.back() != 13, "an add prompt looks like 123+45, got '",
              printable(text), "'");
    auto sign = std::find(out.begin(), out.end(), 13);
    int64_t left = sign - out.begin(), right = out.end() - sign - 1;
    QKV_CHECK(left <= digits_ && right <= digits_, "the model adds numbers of up to ", digits_, " digits, got '",
              printable(text), "'");
    // Pad both operands with leading zeros, as in training.
    out.insert(sign + 1, digits_ - right, 3);
    out.insert(out.begin(), digits_ - left, 3);
  } else {
    QKV_CHECK(static_cast<int64_t>(out.size()) <= max_len_, "the model was trained on inputs of up to ", max_len_,
              " symbols, got ", out.size());
  }
  return out;
}

std::string SequenceTask::token_text(int64_t id) const {
  if (id == kPad) return "_";
  if (id == kSep) return "=";
  if (id == kEos) return ".";
  if (id >= 3 && id < vocab()) return std::string(1, symbols_[id - 3]);
  return "?";
}

std::string SequenceTask::input_text(const std::vector<int64_t>& input) const {
  std::string out;
  for (int64_t id : input) out += token_text(id);
  return out;
}

std::string SequenceTask::answer_text(const std::vector<int64_t>& answer) const {
  std::string out = input_text(answer);
  if (name_ == "add") std::reverse(out.begin(), out.end());
  return out;
}

TextTask::TextTask(const std::string& path) : path_(path) {
  std::string text = io::read_regular_file(path, kMaxTextBytes, "--data file");  // it keeps the whole text in memory
  QKV_CHECK(text.size() >= 64, "--data file '", printable(path), "' holds ", text.size(),
            text.size() == 1 ? " byte" : " bytes", "; a text model's data needs at least 64");
  size_t split = text.size() * 9 / 10;
  train_ = text.substr(0, split);
  held_out_ = text.substr(split);
}

}  // namespace qkv::cli

namespace qkv::cli {
std::string data_dir() {
  // An installed program (<prefix>/bin/qkv) reads <prefix>/share/qkv; one in a build tree, the source's.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / QKV_INSTALLED_DATA_DIR;
    if (std::filesystem::is_regular_file(installed / "text.txt", ec)) return installed.string();
  }
  return QKV_DATA_DIR;
}

std::string default_text_path() { return data_dir() + "/text.txt"; }
}  // namespace qkv::cli
