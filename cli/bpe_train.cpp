// Learning GPT-2-style BPE merges from a text (bpe.h's train_bpe): the
// classic algorithm (Sennrich et al., 2016, as GPT-2 and Hugging Face's
// tokenizers run it over pre-tokenised pieces), with each pair's count kept
// up to date and a heap of candidates, so a merge costs only the pieces that
// hold its pair.
#include <algorithm>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "bpe.h"
#include "common.h"

namespace qkv::cli {

namespace {

constexpr size_t kMaxLearnedPiece = 256;  // longer pieces (runs of spaces) keep their byte tokens

struct Piece {
  std::vector<int32_t> tokens;
  int64_t count;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

class Trainer {
 public:
  explicit Trainer(std::string_view text) {
    std::unordered_map<std::string_view, int64_t> counts;
    split_pieces(text, [&](std::string_view p) {
      if (p.size() >= 2 && p.size() <= kMaxLearnedPiece) ++counts[p];  // one byte has nothing to merge
    });
    // In the order of their text, so that the result does not depend on the hash map's.
    std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [p, n] : sorted) {
      Piece piece{{}, n};
      for (unsigned char c : p) piece.tokens.push_back(c);
      pieces_.push_back(std::move(piece));
    }
    for (int b = 0; b < 256; ++b) {
      bytes_.push_back(std::string(1, static_cast<char>(b)));
      id_of_[bytes_.back()] = b;
    }
    for (size_t i = 0; i < pieces_.size(); ++i) count_pairs(static_cast<int32_t>(i), +1);
    for (const auto& [key, n] : pair_counts_) push(key);
  }

  // Merges the most frequent pair into a new token; false when no pair occurs twice.
  bool merge_next() {
    while (!heap_.empty()) {
      const auto [n, left_neg, right_neg] = heap_.top();
      heap_.pop();
      const int32_t left = -left_neg, right = -right_neg;
      const uint64_t key = pair_key(left, right);
      const auto it = pair_counts_.find(key);
      const int64_t now = it == pair_counts_.end() ? 0 : it->second;
      if (now != n) {  // stale: pushed again with its count now, if it still occurs
        if (now > 0) push(key);
        continue;
      }
      if (n < 2) return false;
      apply(left, right);
      return true;
    }
    return false;
  }

  std::map<std::string, std::string> files() const {
    nlohmann::ordered_json vocab;
    for (size_t id = 0; id < bytes_.size(); ++id) vocab[byte_level_text(bytes_[id])] = id;
    vocab["<|endoftext|>"] = bytes_.size();
    std::string merges = "#version: 0.2\n";
    for (const auto& [left, right] : merges_)
      merges += byte_level_text(bytes_[left]) + " " + byte_level_text(bytes_[right]) + "\n";
    return {{"vocab.json", vocab.dump()}, {"merges.txt", merges}};
  }

  int64_t tokens() const { return static_cast<int64_t>(bytes_.size()); }

 private:
  // Adds (sign +1) or removes (-1) the pairs of piece i to the counts, and notes where each pair occurs.
  void count_pairs(int32_t i, int sign) {
    const Piece& p = pieces_[i];
    for (size_t k = 0; k + 1 < p.tokens.size(); ++k) {
      const uint64_t key = pair_key(p.tokens[k], p.tokens[k + 1]);
      pair_counts_[key] += sign * p.count;
      if (sign > 0) where_[key].insert(i);
    }
  }

  void push(uint64_t key) {
    heap_.emplace(pair_counts_[key], -static_cast<int32_t>(key >> 32), -static_cast<int32_t>(key & 0xffffffffu));
  }

  void apply(int32_t left, int32_t right) {
    // Two merges can spell one token ("ab" + "c", "a" + "bc"): the second reuses its id, as tokenizers do.
    std::string joined = bytes_[left] + bytes_[right];
    auto [known, is_new] = id_of_.emplace(joined, static_cast<int32_t>(bytes_.size()));
    const int32_t merged = known->second;
    if (is_new) bytes_.push_back(std::move(joined));
    merges_.emplace_back(left, right);
    const uint64_t key = pair_key(left, right);
    std::vector<int32_t> holders(where_[key].begin(), where_[key].end());
    std::sort(holders.begin(), holders.end());
    where_.erase(key);
    std::unordered_set<uint64_t> changed;
    for (int32_t i : holders) {
      Piece& p = pieces_[i];
      count_pairs(i, -1);
      std::vector<int32_t> tokens;
      for (size_t k = 0; k < p.tokens.size(); ++k) {
        if (k + 1 < p.tokens.size() && p.tokens[k] == left && p.tokens[k + 1] == right) {
          tokens.push_back(merged);
          ++k;
        } else {
          tokens.push_back(p.tokens[k]);
        }
      }
      p.tokens = std::move(tokens);
      count_pairs(i, +1);
      for (size_t k = 0; k + 1 < p.tokens.size(); ++k) changed.insert(pair_key(p.tokens[k], p.tokens[k + 1]));
    }
    pair_counts_.erase(key);
    std::vector<uint64_t> ordered(changed.begin(), changed.end());
    std::sort(ordered.begin(), ordered.end());
    for (uint64_t k : ordered) push(k);
  }

  std::vector<Piece> pieces_;
  std::vector<std::string> bytes_;  // id -> its bytes
  std::unordered_map<std::string, int32_t> id_of_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int64_t> pair_counts_;
  std::unordered_map<uint64_t, std::unordered_set<int32_t>> where_;  // pair -> the pieces that may hold it
  // (count, -left, -right): the most frequent pair on top, ties to the smaller ids.
  std::priority_queue<std::tuple<int64_t, int32_t, int32_t>> heap_;
};

}  // namespace

std::map<std::string, std::string> train_bpe(std::string_view text, int64_t vocab_size,
                                             const std::function<void(int64_t, int64_t)>& progress) {
  QKV_CHECK(vocab_size >= 257 && vocab_size <= (int64_t{1} << 20), "a BPE vocabulary of ", vocab_size,
            " tokens: it needs the 256 bytes and <|endoftext|>, and at most 2^20");
  Trainer trainer(text);
  const int64_t most = vocab_size - 257;  // new tokens
  while (trainer.tokens() < vocab_size - 1 && trainer.merge_next())
    if (progress && (trainer.tokens() - 256) % 256 == 0) progress(trainer.tokens() - 256, most);
  return trainer.files();
}

}  // namespace qkv::cli
