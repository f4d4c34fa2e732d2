// GPT-2's byte-level BPE (bpe.h). The pattern and the merge order follow
// GPT-2's encoder.py; tests/fixtures/gpt2/ holds GPT-2's own vocabulary and
// ids made by tiktoken to compare with.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <pcre2.h>
#include <sys/stat.h>

#include <array>
#include <climits>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common.h"
#include "io/folder.h"
#include "io/safetensors.h"

namespace qkv::cli {

namespace {

// GPT-2's pre-tokenisation: contractions, letters, numbers, other symbols (each optionally after one
// space), and whitespace (a run before a non-space gives its last space to what follows).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr int64_t kMaxFileBytes = int64_t{32} << 20;  // GPT-2's tokenizer.json is 1.4 MB; 128k vocabularies ~10 MB
constexpr int64_t kMaxTokens = int64_t{1} << 20;      // GPT-2 has 50,257
constexpr int kMaxJsonDepth = 16;                     // a tokenizer.json nests 4 deep
constexpr size_t kMaxTokenBytes = 1024;
constexpr size_t kCacheEntries = 1 << 16;

const std::array<int, 256>& byte_chars() {
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    int extra = 0;
    for (int b = 0; b < 256; ++b)
      t[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE) ? b : 256 + extra++;
    return t;
  }();
  return table;
}

void append_utf8(std::string& out, int cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A vocabulary's spelling of a token back to its bytes; false if a character is not one of GPT-2's 256.
bool token_from_text(std::string_view text, std::string& bytes) {
  static const std::unordered_map<int, uint8_t> inverse = [] {
    std::unordered_map<int, uint8_t> m;
    for (int b = 0; b < 256; ++b) m[byte_chars()[b]] = static_cast<uint8_t>(b);
    return m;
  }();
  bytes.clear();
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<uint8_t>(text[i]);
    int cp = -1, n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : 0;
    if (n == 1) cp = c;
    if (n == 2 && i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80)
      cp = ((c & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
    auto it = n ? inverse.find(cp) : inverse.end();
    if (it == inverse.end()) return false;
    bytes += static_cast<char>(it->second);
    i += static_cast<size_t>(n);
  }
  return !bytes.empty();
}

// JSON with at most kMaxJsonDepth levels (a deep file is refused while parsed, not after).
nlohmann::json parse_json(std::string_view text, const std::string& where) {
  try {
    return nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      QKV_CHECK(depth <= kMaxJsonDepth, where, ": nested more than ", kMaxJsonDepth, " levels deep");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    throw Error(cat(where, ": not JSON (", e.what(), ")"));
  }
}

// A file of the folder: regular, bounded, and (if a link) resolving inside the folder.
std::string folder_file(const std::filesystem::path& folder, const char* name, const char* what) {
  return io::read_regular_file(io::file_in_folder(folder.string(), name, "tokenizer folder"), kMaxFileBytes, what);
}

}  // namespace

int byte_to_char(uint8_t byte) { return byte_chars()[byte]; }

std::string byte_level_text(std::string_view bytes) {
  std::string out;
  for (char c : bytes) append_utf8(out, byte_chars()[static_cast<uint8_t>(c)]);
  return out;
}

// GPT-2's pattern, compiled once per tokenizer with PCRE2 (Unicode properties, invalid UTF-8 allowed: such
// bytes match nothing and become pieces of their own).
struct BpeTokenizer::Pattern {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  Pattern() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    QKV_CHECK(code != nullptr, "GPT-2's pattern does not compile with this PCRE2 (error ", error, ")");
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT (some CPUs), the interpreter does the same
    match = pcre2_match_data_create_from_pattern(code, nullptr);
  }
  ~Pattern() {
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
  // Calls piece(start, length) for consecutive pieces covering all of `text`.
  template <typename F> void split(std::string_view text, F&& piece) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t at = 0;
    while (at < text.size()) {
      const int rc = pcre2_match(code, subject, text.size(), at, 0, match, nullptr);
      if (rc < 0) {  // nothing more matches: the rest is bytes of invalid UTF-8
        piece(at, text.size() - at);
        return;
      }
      const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match);
      if (range[0] > at) piece(at, range[0] - at);  // invalid UTF-8 between matches
      QKV_CHECK(range[1] > range[0], "GPT-2's pattern matched nothing at byte ", range[0]);
      piece(range[0], range[1] - range[0]);
      at = range[1];
    }
  }
};

void split_pieces(std::string_view text, const std::function<void(std::string_view)>& piece) {
  const BpeTokenizer::Pattern pattern;
  pattern.split(text, [&](size_t start, size_t length) { piece(text.substr(start, length)); });
}

BpeTokenizer::BpeTokenizer() : pattern_(std::make_unique<Pattern>()) {
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

void BpeTokenizer::add_token(const std::string& bytes, int64_t id, const std::string& where) {
  QKV_CHECK(id >= 0 && id < kMaxTokens, where, ": token id ", id, " is outside [0, ", kMaxTokens, ")");
  QKV_CHECK(bytes.size() <= kMaxTokenBytes, where, ": token ", id, " is longer than ", kMaxTokenBytes, " bytes");
  if (static_cast<int64_t>(bytes_of_.size()) <= id) bytes_of_.resize(static_cast<size_t>(id) + 1);
  QKV_CHECK(bytes_of_[id].empty(), where, ": token id ", id, " is given twice");
  QKV_CHECK(id_of_.emplace(bytes, id).second, where, ": token '", printable(byte_level_text(bytes), 40),
            "' is given twice");
  bytes_of_[id] = bytes;
  if (bytes.size() == 1) byte_id_[static_cast<uint8_t>(bytes[0])] = id;
}

void BpeTokenizer::add_merge(std::string_view line, int64_t rank, const std::string& where) {
  const size_t space = line.find(' ');
  QKV_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == std::string_view::npos, where, ": merge ",
            rank + 1, " is not two tokens separated by one space");
  std::string left, right;
  QKV_CHECK(token_from_text(line.substr(0, space), left) && token_from_text(line.substr(space + 1), right), where,
            ": merge ", rank + 1, " spells a token with characters GPT-2's byte-level BPE does not use");
  auto a = id_of_.find(left), b = id_of_.find(right), ab = id_of_.find(left + right);
  QKV_CHECK(a != id_of_.end() && b != id_of_.end() && ab != id_of_.end(), where, ": merge ", rank + 1, " ('",
            printable(std::string(line), 60), "') names a token the vocabulary does not hold");
  merges_.emplace(static_cast<uint64_t>(a->second) << 32 | static_cast<uint64_t>(b->second),
                  std::make_pair(rank, ab->second));  // a repeated merge keeps its first rank
}

void BpeTokenizer::finish(const std::string& where) {
  for (int b = 0; b < 256; ++b)
    QKV_CHECK(byte_id_[b] >= 0, where, ": the vocabulary has no token for byte ", b,
              " (a byte-level BPE holds all 256)");
  auto eot = id_of_.find("<|endoftext|>");
  if (specials_.empty() && eot != id_of_.end()) specials_.emplace_back(eot->first, eot->second);
}

BpeTokenizer BpeTokenizer::from_vocab_and_merges(std::string_view vocab_json, std::string_view merges,
                                                 const std::string& where) {
  BpeTokenizer t;
  nlohmann::json vocab = parse_json(vocab_json, where + " vocab.json");
  QKV_CHECK(vocab.is_object() && !vocab.empty(), where, " vocab.json: not an object of tokens and ids");
  QKV_CHECK(static_cast<int64_t>(vocab.size()) <= kMaxTokens, where, " vocab.json: ", vocab.size(),
            " tokens, more than ", kMaxTokens);
  std::string bytes;
  for (const auto& [text, id] : vocab.items()) {
    QKV_CHECK(id.is_number_integer(), where, " vocab.json: the id of '", printable(text, 40), "' is not an integer");
    // GPT-2's one special token is spelled as itself; every other token in GPT-2's byte-level characters.
    if (text == "<|endoftext|>")
      bytes = text;
    else
      QKV_CHECK(token_from_text(text, bytes), where, " vocab.json: token '", printable(text, 40),
                "' uses characters GPT-2's byte-level BPE does not");
    t.add_token(bytes, id.get<int64_t>(), where + " vocab.json");
  }
  int64_t rank = 0;
  for (size_t at = 0; at < merges.size();) {
    size_t end = merges.find('\n', at);
    std::string_view line = merges.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? merges.size() : end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (rank == 0 && line.rfind("#version", 0) == 0)) continue;
    QKV_CHECK(rank < kMaxTokens, where, " merges.txt: more than ", kMaxTokens, " merges");
    t.add_merge(line, rank++, where + " merges.txt");
  }
  t.finish(where);
  return t;
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(std::string_view text, const std::string& where) {
  nlohmann::json j = parse_json(text, where);
  QKV_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where, ": no \"model\" object");
  const nlohmann::json& model = j["model"];
  QKV_CHECK(model.value("type", "") == "BPE", where, ": model type '", printable(model.value("type", ""), 40),
            "': qkv reads byte-level BPE tokenizers (GPT-2's)");
  QKV_CHECK(
      model.contains("vocab") && model["vocab"].is_object() && model.contains("merges") && model["merges"].is_array(),
      where, ": its model has no vocab object or merges array");
  QKV_CHECK(static_cast<int64_t>(model["merges"].size()) <= kMaxTokens, where, ": more than ", kMaxTokens, " merges");
  std::string merges;
  for (const auto& m : model["merges"]) {
    QKV_CHECK(m.is_string() || (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()), where,
              ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
    merges += (m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>()) + "\n";
  }
  BpeTokenizer t = from_vocab_and_merges(model["vocab"].dump(), merges, where);
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    t.specials_.clear();
    for (const auto& a : j["added_tokens"]) {
      QKV_CHECK(a.is_object() && a.contains("content") && a["content"].is_string() && a.contains("id") &&
                    a["id"].is_number_integer(),
                where, ": an added token without a string content and an integer id");
      const std::string content = a["content"].get<std::string>();
      const int64_t id = a["id"].get<int64_t>();
      if (!t.id_of_.count(content)) t.add_token(content, id, where);
      QKV_CHECK(t.id_of_[content] == id, where, ": added token '", printable(content, 40), "' has two ids");
      t.specials_.emplace_back(content, id);
    }
  }
  return t;
}

std::map<std::string, std::string> BpeTokenizer::read_folder(const std::string& folder) {
  const std::filesystem::path dir(folder);
  io::check_folder(folder, "a tokenizer is a folder with vocab.json and merges.txt, or tokenizer.json");
  auto exists = [&](const char* name) { return std::filesystem::exists(dir / name); };
  if (exists("vocab.json") && exists("merges.txt"))
    return {{"vocab.json", folder_file(dir, "vocab.json", "vocab file")},
            {"merges.txt", folder_file(dir, "merges.txt", "merges file")}};
  QKV_CHECK(exists("tokenizer.json"), printable(folder),
            ": holds neither vocab.json and merges.txt nor tokenizer.json");
  return {{"tokenizer.json", folder_file(dir, "tokenizer.json", "tokenizer file")}};
}

BpeTokenizer BpeTokenizer::from_files(const std::map<std::string, std::string>& files, const std::string& where) {
  if (files.count("vocab.json") && files.count("merges.txt"))
    return from_vocab_and_merges(files.at("vocab.json"), files.at("merges.txt"), where);
  QKV_CHECK(files.size() == 1 && files.count("tokenizer.json"), where,
            ": a tokenizer is vocab.json and merges.txt, or tokenizer.json");
  return from_tokenizer_json(files.at("tokenizer.json"), where + "/tokenizer.json");
}

BpeTokenizer BpeTokenizer::load(const std::string& folder) {
  return from_files(read_folder(folder), printable(folder));
}

const std::string& BpeTokenizer::token_bytes(int64_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size() && !bytes_of_[id].empty(), "token id ", id, " is not in the vocabulary (",
            vocab_size(), " tokens)");
  return bytes_of_[id];
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) out += token_bytes(id);
  return out;
}

// One piece: its bytes as one-byte tokens, then GPT-2's loop: merge every occurrence of the pair of lowest
// rank, until no pair has a merge.
void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  auto cached = cache_.find(std::string(piece));
  if (cached != cache_.end()) {
    out.insert(out.end(), cached->second.begin(), cached->second.end());
    return;
  }
  std::vector<int64_t> ids;
  ids.reserve(piece.size());
  for (char c : piece) ids.push_back(byte_id_[static_cast<uint8_t>(c)]);
  while (ids.size() > 1) {
    int64_t best_rank = LLONG_MAX, merged = -1;
    uint64_t best_pair = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      auto it = merges_.find(static_cast<uint64_t>(ids[i]) << 32 | static_cast<uint64_t>(ids[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank)
        best_rank = it->second.first, merged = it->second.second, best_pair = it->first;
    }
    if (merged < 0) break;
    size_t w = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + 1 < ids.size() && (static_cast<uint64_t>(ids[i]) << 32 | static_cast<uint64_t>(ids[i + 1])) == best_pair)
        ids[w++] = merged, ++i;
      else
        ids[w++] = ids[i];
    }
    ids.resize(w);
  }
  if (cache_.size() >= kCacheEntries) cache_.clear();
  out.insert(out.end(), ids.begin(), ids.end());
  cache_.emplace(std::string(piece), std::move(ids));
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int64_t>& out) const {
  pattern_->split(text, [&](size_t start, size_t length) { encode_piece(text.substr(start, length), out); });
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool special) const {
  std::vector<int64_t> out;
  size_t at = 0;
  while (special && at < text.size()) {  // the earliest special token's text, then the text before it
    size_t first = std::string_view::npos;
    const std::pair<std::string, int64_t>* which = nullptr;
    for (const auto& s : specials_) {
      size_t p = text.find(s.first, at);
      if (p < first || (p == first && which && s.first.size() > which->first.size())) first = p, which = &s;
    }
    if (!which) break;
    encode_ordinary(text.substr(at, first - at), out);
    out.push_back(which->second);
    at = first + which->first.size();
  }
  encode_ordinary(text.substr(at), out);
  return out;
}

}  // namespace qkv::cli
