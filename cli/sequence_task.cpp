#include "sequence_task.h"

#include <algorithm>
#include <cstdio>

#include "autograd/error.h"
#include "bounds.h"
#include "decoding.h"
#include "kinds.h"
#include "model_spec.h"

namespace qkv::cli {

std::unique_ptr<Task> make_copy_task(const TaskRow& row, const ModelSpec& spec, bool) {
  return std::make_unique<SequenceTask>(row, SequenceTask::Answer::Copy, spec.max_len, spec.digits);
}
std::unique_ptr<Task> make_reverse_task(const TaskRow& row, const ModelSpec& spec, bool) {
  return std::make_unique<SequenceTask>(row, SequenceTask::Answer::Reverse, spec.max_len, spec.digits);
}
std::unique_ptr<Task> make_sort_task(const TaskRow& row, const ModelSpec& spec, bool) {
  return std::make_unique<SequenceTask>(row, SequenceTask::Answer::Sort, spec.max_len, spec.digits);
}
std::unique_ptr<Task> make_add_task(const TaskRow& row, const ModelSpec& spec, bool) {
  return std::make_unique<SequenceTask>(row, SequenceTask::Answer::Sum, spec.max_len, spec.digits);
}

SequenceTask::SequenceTask(const TaskRow& row, Answer answer, int64_t max_len, int64_t digits)
    : ExampleTask(row), answer_(answer), symbols_("0123456789+"), max_len_(max_len), digits_(digits) {
  check_range("max-len", max_len, 1, kMaxInputLength);
  check_range("digits", digits, 1, kMaxDigits);
}

int64_t SequenceTask::max_input() const { return adds() ? 2 * digits_ + 1 : max_len_; }
int64_t SequenceTask::max_answer() const { return adds() ? digits_ + 1 : max_len_; }

void SequenceTask::resolve(ModelSpec& spec, const KindRow& kind, bool) {
  take_vocab(spec);
  int64_t need = kind.context_for(spec, *this);  // what this kind reads around the input and the answer
  if (spec.context <= 0) spec.context = need;
  QKV_CHECK(spec.context >= need, "--context ", spec.context, " is too short for the ", spec.task, " task: it needs ",
            need);
  spec.example_tokens = need;  // a longer context adds positions, not work
}

Example SequenceTask::sample(Generator& gen) const {
  Example e;
  if (adds()) {
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
  if (answer_ == Answer::Reverse) std::reverse(out.begin(), out.end());
  if (answer_ == Answer::Sort) std::sort(out.begin(), out.end());
  if (adds()) {
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
    bool allowed = at != std::string::npos && (adds() || c != '+');
    QKV_CHECK(allowed, "prompt '", printable(text), "' has '", printable(std::string(1, c)), "', which is not in the ",
              name(), " task's alphabet (", adds() ? "digits and +" : "digits", ")");
    out.push_back(3 + static_cast<int64_t>(at));
  }
  QKV_CHECK(!out.empty(), "empty prompt");
  if (adds()) {
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
  if (adds()) std::reverse(out.begin(), out.end());
  return out;
}

double SequenceTask::accuracy(Runner& runner, int64_t count, Generator& gen, const Progress& progress,
                              double* loss) const {
  // In chunks of 1024 examples, so memory stays bounded whatever the count.
  int64_t right = 0;
  double loss_sum = 0;
  for (int64_t done = 0; done < count;) {
    int64_t n = std::min<int64_t>(1024, count - done);
    std::vector<Example> examples;
    std::vector<std::vector<int64_t>> inputs;
    for (int64_t i = 0; i < n; ++i) {
      examples.push_back(sample(gen));
      inputs.push_back(examples.back().input);
    }
    std::vector<std::vector<int64_t>> got = decoding::answer(runner, inputs);
    if (loss) {
      NoGradGuard no_grad;
      const bool was_training = runner.module().is_training();
      runner.module().eval();
      loss_sum += runner.driver().task_loss(examples, nullptr).item() * static_cast<double>(n);
      runner.module().train(was_training);
    }
    for (int64_t i = 0; i < n; ++i) right += got[i] == examples[i].answer;
    done += n;
    if (progress) progress(done, count, "examples");
  }
  if (loss) *loss = loss_sum / static_cast<double>(count);
  return static_cast<double>(right) / static_cast<double>(count);
}

// Exact match on 500 examples, the same at every evaluation.
train::Evaluation SequenceTask::evaluate(Runner& runner, Generator& held_out, double target) const {
  train::Evaluation e;
  e.metric = accuracy(runner, 500, held_out, {}, &e.held_out_loss);
  char text[64];  // two decimals, as eval and the classifiers print (500 examples: steps of 0.2%)
  std::snprintf(text, sizeof text, "held-out exact match %.2f%%", 100 * e.metric);
  e.text = text;
  e.reached = target > 0 && e.metric >= target;  // 0: no target
  return e;
}

void SequenceTask::print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                              const Progress& progress) const {
  double acc = accuracy(runner, count, gen, progress);
  std::printf("%s: %s %s, exact match %.2f%% on %lld fresh held-out examples\n", printable(path).c_str(),
              runner.spec().model.c_str(), runner.spec().task.c_str(), 100 * acc, static_cast<long long>(count));
}

// The correct answer to the input (teacher forcing).
Example SequenceTask::prompt_example(const std::string& text, std::string* what) const {
  Example e;
  e.input = encode(text);
  QKV_CHECK(static_cast<int64_t>(e.input.size()) <= max_input(), "the input has ", e.input.size(),
            " symbols; this model reads at most ", max_input());
  e.answer = solve(e.input);
  if (what)
    *what = cat("cross-entropy of the answer ", printable(answer_text(e.answer)), " (", e.answer.size() + 1,
                " tokens with the end mark)");
  return e;
}

void SequenceTask::print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const {
  std::vector<int64_t> input = encode(prompt);
  std::vector<int64_t> out = decoding::answer(runner, {input}, options.temperature, options.top_k, options.gen).front();
  std::printf("%s = %s\n", input_text(input).c_str(), answer_text(out).c_str());
}

std::string SequenceTask::describe(const ModelSpec& spec) const {
  if (adds()) return cat("add, ", spec.digits, "-digit operands");
  return cat(spec.task, ", inputs up to ", spec.max_len, " digits");
}

}  // namespace qkv::cli
