// The tasks whose answer is one label, for the encoder classifier, the ViT
// and the recommender: is a string of brackets balanced (brackets), which
// digit an 8×8 image shows (digits), and which item a user takes next
// (sessions). Each keeps its held-out examples apart from its training ones.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "task.h"

namespace qkv::cli {

/// How well a label model does on held-out examples.
struct LabelMetrics {
  int64_t examples = 0;
  bool ranks = false;                             // items ranked (sessions) rather than classes counted
  double accuracy = 0;                            // classes: the share classified right
  int64_t labels = 0;                             // classes: the confusion matrix's side
  std::vector<int64_t> confusion;                 // classes: [true label][predicted label], row-major
  double hit_rate = 0, ndcg = 0;                  // items: the held-out item among the model's top 10, and its NDCG@10
  double popular_hit_rate = 0, popular_ndcg = 0;  // the same for the 10 most popular items (the baseline)
  double loss = 0;                                // the mean cross-entropy of the scores at the true label
  /// The held-out metric training watches: accuracy, or HR@10.
  double metric() const { return ranks ? hit_rate : accuracy; }
};

/// A task whose examples each have one right label. Classification
/// examples hold input = tokens or pixels, answer = {class}. A sessions
/// training example holds a history and, as its answer, the item after
/// each position; a held-out one the history and {the next item}.
class LabelTask : public ExampleTask {
 public:
  using ExampleTask::ExampleTask;
  /// Whether the metric ranks items (hit rate, NDCG) instead of counting right classes.
  virtual bool ranks_items() const { return false; }
  /// Up to `count` held-out examples: fresh draws from `gen` for brackets,
  /// the fixed split for digits and sessions (the same at every call).
  virtual std::vector<Example> held_out(int64_t count, Generator& gen) const = 0;
  /// A prompt as an example: its input and, where the prompt gives or
  /// implies it, its one right label (else an empty answer). A sessions
  /// prompt is a history, its answer empty.
  virtual Example parse_prompt(const std::string& prompt) const = 0;
  virtual std::string label_text(int64_t label) const = 0;
  /// Items to rank against the model: the most frequent in the training
  /// part, best first (sessions; empty otherwise).
  virtual std::vector<int64_t> popular_items() const { return {}; }

  void resolve(ModelSpec& spec, const KindRow& kind, bool read_data) override;
  train::Evaluation evaluate(Runner& runner, Generator& held_out, double target) const override;
  const char* metric_name() const override { return ranks_items() ? "HR@10" : "accuracy"; }
  void print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                  const Progress& progress) const override;
  Example prompt_example(const std::string& text, std::string* what) const override;
  std::vector<int64_t> prompt_tokens(const std::string& text) const override { return parse_prompt(text).input; }
  /// A held-out input's tokens, as a prompt writes them (items separated by spaces).
  std::string example_prompt(Generator& gen) const override;
  void print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const override;

  /// The model on up to `count` held-out examples.
  LabelMetrics evaluate_labels(Runner& runner, int64_t count, Generator& gen, const Progress& progress) const;
  /// The k likeliest labels for one example, with their probabilities (the
  /// softmax of the scores; for items, over the items, padding excluded).
  std::vector<std::pair<int64_t, double>> top_labels(Runner& runner, const Example& e, int64_t k) const;
};

std::unique_ptr<Task> make_brackets_task(const TaskRow& row, const ModelSpec& spec, bool read_data);
/// The digits CSV is spec.data ("" for the bundled one), read only when
/// `read_data` (a checkpoint's model is described without its data;
/// spec.image then says what its images are).
std::unique_ptr<Task> make_digits_task(const TaskRow& row, const ModelSpec& spec, bool read_data);
std::unique_ptr<Task> make_sessions_task(const TaskRow& row, const ModelSpec& spec, bool read_data);

/// The digits CSV qkv trains on without --data.
std::string default_digits_path();
/// The largest image CSV qkv reads.
inline constexpr int64_t kMaxImageCsvBytes = int64_t{64} << 20;

}  // namespace qkv::cli
