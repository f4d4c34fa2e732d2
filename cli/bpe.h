// GPT-2's byte-level BPE tokenizer, read from a Hugging Face folder
// (vocab.json and merges.txt, or tokenizer.json): text is cut into pieces by
// GPT-2's pattern (PCRE2, with Unicode's letter and number classes), each
// piece's bytes become the vocabulary's one-byte tokens, and the merges are
// applied lowest rank first. Encoding and decoding are exact inverses on any
// bytes, invalid UTF-8 included.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace qkv::cli {

class BpeTokenizer {
 public:
  /// A folder holding vocab.json and merges.txt, or tokenizer.json (model
  /// type "BPE", byte-level). Every file is untrusted: a regular file of
  /// bounded size, inside the folder (a link is followed only to a file in
  /// it), and one-line errors name it.
  static BpeTokenizer load(const std::string& folder);
  /// The tokenizer files of a folder, as load() reads and checks them:
  /// {"vocab.json", "merges.txt"} or {"tokenizer.json"}, name to contents.
  /// What a checkpoint carries, so that it needs no folder.
  static std::map<std::string, std::string> read_folder(const std::string& folder);
  /// From files read_folder() gave (or a checkpoint carried); errors name `where`.
  static BpeTokenizer from_files(const std::map<std::string, std::string>& files, const std::string& where);
  /// From the contents of vocab.json and merges.txt; errors name `where`.
  static BpeTokenizer from_vocab_and_merges(std::string_view vocab_json, std::string_view merges,
                                            const std::string& where);
  /// From the contents of a tokenizer.json; errors name `where`.
  static BpeTokenizer from_tokenizer_json(std::string_view json, const std::string& where);

  /// The ids of `text`. With `special`, a special token's text (e.g.
  /// "<|endoftext|>") is that token; otherwise it is ordinary text.
  std::vector<int64_t> encode(std::string_view text, bool special = false) const;
  /// The bytes of the ids, in order; throws on an id outside the vocabulary.
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Ids lie in [0, vocab_size()).
  int64_t vocab_size() const { return static_cast<int64_t>(bytes_of_.size()); }
  /// The bytes of one token.
  const std::string& token_bytes(int64_t id) const;
  /// The special tokens (added tokens of a tokenizer.json, "<|endoftext|>" of a GPT-2 vocabulary): text, id.
  const std::vector<std::pair<std::string, int64_t>>& specials() const { return specials_; }

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  struct Pattern;  // GPT-2's pattern, compiled (bpe.cpp)

 private:
  BpeTokenizer();
  void add_token(const std::string& bytes, int64_t id, const std::string& where);
  void add_merge(std::string_view line, int64_t rank, const std::string& where);
  void finish(const std::string& where);
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int64_t>& out) const;

  std::vector<std::string> bytes_of_;               // id -> its bytes ("" for an id the vocabulary skips)
  std::unordered_map<std::string, int64_t> id_of_;  // bytes -> id
  // (left id, right id) -> (rank, merged id): the merge of a pair, the lowest rank first.
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;
  int64_t byte_id_[256];
  std::vector<std::pair<std::string, int64_t>> specials_;
  std::unique_ptr<Pattern> pattern_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;  // piece -> ids (bounded)
};

/// Calls `piece` for consecutive pieces covering all of `text`, as GPT-2's
/// pattern cuts it (bytes that are not UTF-8 become pieces of their own).
void split_pieces(std::string_view text, const std::function<void(std::string_view piece)>& piece);

/// Learns GPT-2-style merges from `text` (bpe_train.cpp): its pieces,
/// counted; the 256 bytes as the first tokens (id = byte); then, again and
/// again, the adjacent pair of tokens that occurs most often within pieces
/// merged into a new token, ties to the pair of smaller ids, until
/// `vocab_size` - 1 tokens or no pair occurs twice; "<|endoftext|>" last.
/// Pieces longer than 256 bytes (a run of spaces) are left to the byte
/// tokens, so time stays about linear in the text plus, per merge, the
/// pieces the pair occurs in, and memory linear in the distinct pieces.
/// (Two merges may spell one token: the second reuses its id.) `progress`
/// hears new tokens made of at most `vocab_size` - 257. Returns a
/// tokenizer folder's files: vocab.json and merges.txt.
std::map<std::string, std::string> train_bpe(std::string_view text, int64_t vocab_size,
                                             const std::function<void(int64_t done, int64_t most)>& progress = {});

/// GPT-2's map from bytes to the printable characters its vocabulary spells
/// them with (bytes_to_unicode in GPT-2's encoder.py): the character's code point.
int byte_to_char(uint8_t byte);
/// A token as GPT-2's vocabulary spells it (UTF-8), from its bytes.
std::string byte_level_text(std::string_view bytes);

}  // namespace qkv::cli
