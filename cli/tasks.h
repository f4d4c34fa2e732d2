// The toy tasks `qkv train` learns: copy, reverse, sort and add over digit
// sequences, and byte-level text.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/generator.h"

namespace qkv::cli {

// Token ids shared by the sequence tasks: 0 pads, 1 separates the input from
// the answer (shown as '='), 2 ends the answer; symbols follow.
constexpr int64_t kPad = 0, kSep = 1, kEos = 2;

struct Example {
  std::vector<int64_t> input, answer;  // answer without the EOS
};

class SequenceTask {
 public:
  /// name: copy, reverse, sort or add. max_len bounds the input length for
  /// copy/reverse/sort; digits is the operand length for add.
  SequenceTask(const std::string& name, int64_t max_len, int64_t digits);
  const std::string& name() const { return name_; }
  int64_t vocab() const { return 3 + static_cast<int64_t>(symbols_.size()); }
  int64_t max_input() const;
  int64_t max_answer() const;
  /// A random example: input lengths uniform in [1, max_len]; add's operands
  /// uniform in [0, 10^digits), written with leading zeros to `digits` digits.
  Example sample(Generator& gen) const;
  /// The answer for an input (what a perfect model writes).
  std::vector<int64_t> solve(const std::vector<int64_t>& input) const;
  /// Text -> input tokens; throws qkv::Error naming any symbol outside the task's alphabet.
  std::vector<int64_t> encode(const std::string& text) const;
  /// Answer tokens -> text (add's answers are stored least significant digit first).
  std::string answer_text(const std::vector<int64_t>& answer) const;
  std::string input_text(const std::vector<int64_t>& input) const;
  std::string token_text(int64_t id) const;

 private:
  std::string name_, symbols_;
  int64_t max_len_, digits_;
};

/// Byte-level text (vocabulary 256): the first 90% trains, the rest is held out.
/// The largest --data file qkv reads (1 GiB).
inline constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

class TextTask {
 public:
  explicit TextTask(const std::string& path);
  const std::string& path() const { return path_; }
  const std::string& train() const { return train_; }
  const std::string& held_out() const { return held_out_; }

 private:
  std::string path_, train_, held_out_;
};

/// The folder of the bundled data: share/qkv beside an installed program, else the source tree's cli/data.
std::string data_dir();
/// The text `qkv train --task text` uses without --data.
std::string default_text_path();

}  // namespace qkv::cli
