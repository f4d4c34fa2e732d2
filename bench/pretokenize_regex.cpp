// Which regex library cuts text into GPT-2's pieces fastest: PCRE2 (JIT) or
// ICU, on the same pattern and file (the measurement behind qkv's choice of
// PCRE2, README "Dependencies"). Not part of the build:
//
//   g++ -O2 -std=c++20 bench/pretokenize_regex.cpp -o /tmp/pretok $(pkg-config --cflags --libs libpcre2-8 icu-i18n)
//   /tmp/pretok FILE
//
// Prints each library's pieces and the median of 7 rounds, in MB/s.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

static const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

static size_t pcre2_pieces(const std::string& text) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  static pcre2_code* code = [&] {
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    return c;
  }();
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  size_t at = 0, pieces = 0;
  while (at < text.size()) {
    if (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, 0, match, nullptr) < 0) break;
    at = pcre2_get_ovector_pointer(match)[1];
    ++pieces;
  }
  pcre2_match_data_free(match);
  return pieces;
}

static size_t icu_pieces(const std::string& text) {
  UErrorCode status = U_ZERO_ERROR;
  static icu::RegexPattern* pattern = icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kPattern), 0, status);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);  // ICU matches UTF-16: the conversion is its cost too
  icu::RegexMatcher* m = pattern->matcher(u, status);
  size_t pieces = 0;
  while (m->find()) ++pieces;
  delete m;
  return pieces;
}

static double median_seconds(const std::function<size_t()>& f, size_t& pieces) {
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    auto start = std::chrono::steady_clock::now();
    pieces = f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: pretok FILE\n"), 2;
  std::ifstream f(argv[1], std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  size_t a = 0, b = 0;
  double tp = median_seconds([&] { return pcre2_pieces(text); }, a);
  double ti = median_seconds([&] { return icu_pieces(text); }, b);
  std::printf("PCRE2 (JIT): %zu pieces, %.3f s, %.1f MB/s\nICU:         %zu pieces, %.3f s, %.1f MB/s\n", a, tp,
              text.size() / 1e6 / tp, b, ti, text.size() / 1e6 / ti);
  return a == b ? 0 : 1;
}
