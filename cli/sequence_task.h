// The sequence tasks: copy, reverse, sort and add over digit sequences. A
// model reads the input and writes the answer token by token.
#pragma once

#include <string>
#include <vector>

#include "task.h"

namespace qkv::cli {

class SequenceTask : public ExampleTask {
 public:
  /// What the answer is to an input of digits: the same digits, reversed,
  /// sorted, or (an input of two numbers) their sum.
  enum class Answer { Copy, Reverse, Sort, Sum };
  /// max_len bounds the input length for copy/reverse/sort; digits is the operand length for add.
  SequenceTask(const TaskRow& row, Answer answer, int64_t max_len, int64_t digits);
  int64_t vocab() const override { return 3 + static_cast<int64_t>(symbols_.size()); }
  int64_t max_input() const override;
  int64_t max_answer() const override;
  void resolve(ModelSpec& spec, const KindRow& kind, bool read_data) override;
  /// A random example: input lengths uniform in [1, max_len]; add's operands
  /// uniform in [0, 10^digits), written with leading zeros to `digits` digits.
  Example sample(Generator& gen) const override;
  /// The answer for an input (what a perfect model writes).
  std::vector<int64_t> solve(const std::vector<int64_t>& input) const;
  /// Text -> input tokens; throws qkv::Error naming any symbol outside the task's alphabet.
  std::vector<int64_t> encode(const std::string& text) const;
  /// Answer tokens -> text (add's answers are stored least significant digit first).
  std::string answer_text(const std::vector<int64_t>& answer) const;
  std::string input_text(const std::vector<int64_t>& input) const;
  std::string token_text(int64_t id) const override;

  train::Evaluation evaluate(Runner& runner, Generator& held_out, double target) const override;
  const char* metric_name() const override { return "exact match"; }
  void print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                  const Progress& progress) const override;
  Example prompt_example(const std::string& text, std::string* what) const override;
  std::vector<int64_t> prompt_tokens(const std::string& text) const override { return encode(text); }
  std::string example_prompt(Generator& gen) const override { return input_text(sample(gen).input); }
  void print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const override;
  std::string describe(const ModelSpec& spec) const override;

 private:
  bool adds() const { return answer_ == Answer::Sum; }
  /// Exact-match accuracy on `count` fresh examples from `gen`.
  /// Exact match on `count` fresh examples; `loss`, if given, gets the training loss's mean over them.
  double accuracy(Runner& runner, int64_t count, Generator& gen, const Progress& progress,
                  double* loss = nullptr) const;
  Answer answer_;
  std::string symbols_;
  int64_t max_len_, digits_;
};

std::unique_ptr<Task> make_copy_task(const TaskRow& row, const ModelSpec& spec, bool read_data);
std::unique_ptr<Task> make_reverse_task(const TaskRow& row, const ModelSpec& spec, bool read_data);
std::unique_ptr<Task> make_sort_task(const TaskRow& row, const ModelSpec& spec, bool read_data);
std::unique_ptr<Task> make_add_task(const TaskRow& row, const ModelSpec& spec, bool read_data);

}  // namespace qkv::cli
