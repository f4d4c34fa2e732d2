#include "io/metadata.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "autograd/error.h"
#include "io/strict_json.h"

namespace qkv::io {

namespace detail {

namespace {

// nlohmann-json's DOM builder behind a SAX filter that refuses repeated keys
// (one set of keys per open object: constant time per key; the hand-written
// parser compared each key with every earlier one, and a 1.8 MB header took
// 72 s to reject) and deep nesting. nlohmann's own callback parser was no
// way out: it rescans the parent object at the end of every child object,
// quadratic again (a 160,000-key header took minutes).
class StrictSax {
 public:
  using json = nlohmann::json;
  explicit StrictSax(json& result) : dom_(result, /*allow_exceptions=*/true) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    deeper();
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second) throw Error(cat("JSON: repeated key \"", printable(k), "\""));
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    deeper();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's messages are one line: "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    std::string what = e.what();
    size_t tag = what.find("] ");
    throw Error(cat("JSON: ", printable(tag == std::string::npos ? what : what.substr(tag + 2))));
  }

 private:
  void deeper() {
    if (++depth_ > kMaxJsonDepth) throw Error(cat("JSON: nesting deeper than ", kMaxJsonDepth));
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::unordered_set<std::string>> keys_;
  int depth_ = 0;
};

}  // namespace

nlohmann::json parse_strict_json(std::string_view text) {
  nlohmann::json result;
  StrictSax sax(result);
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  return result;
}

}  // namespace detail

std::string exact_number(double value) {
  // The shortest text that reads back to the same double: 0.99, not 0.98999999999999999.
  char text[32];
  auto [end, error] = std::to_chars(text, text + sizeof text, value);
  return error == std::errc() ? std::string(text, end) : "nan";
}

bool parse_finite(std::string_view text, double& out) {
  if (text.empty()) return false;
  std::string s(text);
  char* end = nullptr;
  // ERANGE on underflow still returns the (subnormal) value, which reads back exactly.
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out);
}

double parse_number(std::string_view text, std::string_view what) {
  double v = 0;
  QKV_CHECK(parse_finite(text, v), what, ": '", printable(std::string(text)), "' is not a finite number");
  return v;
}

bool parse_integer(std::string_view text, int64_t& out) {
  if (text.empty() || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return false;  // stoll skips " " and "+"
  std::string s(text);
  size_t used = 0;
  try {
    out = std::stoll(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used > 0 && used == s.size();
}

std::string json_object(const std::map<std::string, std::string>& fields) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [k, v] : fields) object[k] = v;
  try {
    return object.dump();
  } catch (const nlohmann::json::exception&) {
    throw Error("metadata keys and values must be valid UTF-8");
  }
}

std::map<std::string, std::string> parse_json_object(std::string_view text) {
  nlohmann::json j = detail::parse_strict_json(text);
  QKV_CHECK(j.is_object(), "JSON: expected an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j.items()) {
    QKV_CHECK(v.is_string(), "JSON: the value of \"", printable(k), "\" is not a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

std::map<std::string, double> parse_json_numbers(std::string_view text) {
  nlohmann::json j = detail::parse_strict_json(text);
  QKV_CHECK(j.is_object(), "JSON: expected an object");
  std::map<std::string, double> out;
  for (const auto& [k, v] : j.items())
    if (v.is_number()) out[k] = v.get<double>();
  return out;
}

std::map<std::string, std::string> metadata_object(const std::map<std::string, std::string>& metadata,
                                                   const std::string& key, const std::string& path) {
  try {
    return parse_json_object(metadata.at(key));
  } catch (const Error& e) {
    throw Error(cat(printable(path), ": bad ", key, " in its metadata (", e.what(), ")"));
  }
}

}  // namespace qkv::io
