// The tasks `qkv train` learns, in one table (task.cpp), and the one
// interface every task answers, so that the program asks a task (or its
// row) instead of testing its name. A task is one of five families, by what
// a model reads and writes for it; the model kinds say which families they
// learn (kinds.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/generator.h"
#include "distributed/dist.h"
#include "train/trainer.h"

namespace qkv::cli {

// Token ids shared by the sequence tasks: 0 pads, 1 separates the input from
// the answer (shown as '='), 2 ends the answer; symbols follow.
constexpr int64_t kPad = 0, kSep = 1, kEos = 2;

struct Example {
  std::vector<int64_t> input, answer;  // answer without the EOS
};

/// What a model reads and writes for a task.
enum class TaskFamily {
  Sequence,    // tokens in, tokens out (copy, reverse, sort, add)
  Text,        // bytes, each predicting the next
  TokenLabel,  // tokens in, one class out (brackets)
  ImageLabel,  // an image's pixels in, one class out (digits)
  NextItem,    // a history of items in, the next item out (sessions)
};

/// A new run's settings where neither the flags nor a checkpoint give them.
struct TaskDefaults {
  int64_t batch = 64, eval_every = 250, steps = 4000, max_len = 8, layers = 2;
  double lr = 0.001, dropout = 0, target = 0.99;
};

struct ModelSpec;
struct KindRow;
class Runner;
class Task;

/// One row of the task table: what the program knows of a task before it exists.
struct TaskRow {
  const char* name;
  TaskFamily family;
  TaskDefaults defaults;
  const char* max_len_is;  // what --max-len bounds ("input", "history"), or null: the task takes no --max-len
  bool takes_digits;       // --digits (add's operand length)
  const char* data_is;     // what --data names ("the text for --task text"), or null: it reads no file
  const char* data_noun;   // and what that file is, in advice ("text", "CSV")
  bool prompt_picks_data;  // a prompt may name a held-out example of that file (a digits image's number)
  bool has_target;         // a held-out score that --target can stop at (text has a loss only)
  /// The task of `row` for a model spec; its data is read only when
  /// `read_data` (a checkpoint's model is described without it).
  std::unique_ptr<Task> (*make)(const TaskRow& row, const ModelSpec& spec, bool read_data);
};

/// Every task, in the order --help lists them.
const std::vector<TaskRow>& task_table();
/// The task a run trains without --task.
inline constexpr const char* kDefaultTask = "reverse";
/// The row of `name`; throws "unknown task 'x' (copy, reverse, ...)" otherwise.
const TaskRow& task_row(const std::string& name);
/// Whether a task of that name exists.
bool is_task(const std::string& name);
/// The names of the rows `pick` accepts, joined: "a, b or c" (`last` between the final two).
std::string task_names(const std::function<bool(const TaskRow&)>& pick, const char* last = " or ");

/// Hears how far a long evaluation got: done of total units ("examples").
using Progress = std::function<void(int64_t done, int64_t total, const char* units)>;

/// The options `qkv sample` passes a task.
struct SampleOptions {
  double temperature = 0;
  int64_t top_k = 0, max_new = 200;
  Generator* gen = nullptr;
};

/// A task, built for one model: its vocabulary and examples, how its loss
/// and held-out score are computed, and how its prompts and answers read.
class Task {
 public:
  explicit Task(const TaskRow& row) : row_(row) {}
  virtual ~Task() = default;
  const TaskRow& row() const { return row_; }
  std::string name() const { return row_.name; }
  TaskFamily family() const { return row_.family; }

  // ---- the model's shape ----
  virtual int64_t vocab() const = 0;
  /// The longest input a model reads (tokens, an image's pixels, a
  /// history's items; 0 for text, read in windows of the context).
  virtual int64_t max_input() const { return 0; }
  /// The longest answer (the sequence tasks; 0 for the others).
  virtual int64_t max_answer() const { return 0; }
  /// The labels scored (classes, or every item id); 0 for the tasks that write tokens.
  virtual int64_t labels() const { return 0; }
  /// The square image side of an image task (0 otherwise).
  virtual int64_t image_side() const { return 0; }
  /// Fills what the spec leaves to the task for a model of `kind`
  /// (vocabulary, context, classes) and checks the rest against the task;
  /// reads its data (use_data) when `read_data` and it needs the spec first.
  virtual void resolve(ModelSpec& spec, const KindRow& kind, bool read_data) = 0;
  /// Sets spec.vocab to the task's; a file's that differs (a ViT's of
  /// 1000000, which no tensor counts) is refused rather than shown.
  void take_vocab(ModelSpec& spec) const;
  /// Reads the data a model trains or is evaluated on ("" for the bundled
  /// file); only tasks whose row has data_is.
  virtual void use_data(const std::string& path, const ModelSpec& spec);

  // ---- training and evaluation ----
  /// This rank's part of a training step: `batch` examples (or windows)
  /// drawn from `data`, the slice `mine` of them.
  virtual train::StepLoss step_loss(Runner& runner, int64_t batch, Generator& data, const dist::Slice& mine) const = 0;
  /// The loss on one batch of `size` drawn from a copy of `gen`, the same
  /// batch at every call: what a gradient check evaluates over and over.
  virtual std::function<Tensor()> fixed_batch_loss(Runner& runner, int64_t size, Generator gen) const = 0;
  /// The held-out score training watches, on examples (or windows) drawn
  /// from `held_out` (a fresh copy of one stream at every evaluation);
  /// `target` > 0: reaching it ends the run.
  virtual train::Evaluation evaluate(Runner& runner, Generator& held_out, double target) const = 0;
  /// What evaluate() measures: "exact match", "accuracy", ...
  virtual const char* metric_name() const = 0;
  /// `qkv eval`: the held-out score of `count` examples (or windows) of the
  /// model in `path`, printed; `progress` hears how many are done, of how
  /// many, and what they are ("examples", "windows").
  virtual void print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                          const Progress& progress) const = 0;

  // ---- prompts ----
  /// The example a prompt's loss scores: a task input with its correct
  /// answer (teacher forcing), a labelled input, a history predicting each
  /// next item, or a text's bytes and each one's successor. `what`
  /// receives a description of the loss.
  virtual Example prompt_example(const std::string& text, std::string* what) const = 0;
  /// A prompt as the tokens the model reads (a task input's symbols, a
  /// text's bytes, a labelled input's tokens or pixels, a history's items).
  virtual std::vector<int64_t> prompt_tokens(const std::string& text) const = 0;
  /// The loss of that example, as training scores one.
  virtual Tensor example_loss(Runner& runner, const Example& e) const;
  /// `qkv sample`: the model's answer to a prompt, printed.
  virtual void print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const = 0;
  /// A held-out example as a prompt a user can type (a task input, a few
  /// words of held-out text, a held-out image's number, a history).
  virtual std::string example_prompt(Generator& gen) const = 0;
  /// A token as maps and answers show it.
  virtual std::string token_text(int64_t id) const = 0;

  // ---- descriptions ----
  /// What the model trains on, for the banner: "reverse", "text (bundled)".
  virtual std::string title(const ModelSpec&) const { return name(); }
  /// `qkv info`'s task line: "add, 3-digit operands".
  virtual std::string describe(const ModelSpec& spec) const = 0;

 private:
  const TaskRow& row_;
};

/// A task whose training examples are drawn one by one (every family but
/// text): a step's loss is the model's loss on a batch of them.
class ExampleTask : public Task {
 public:
  using Task::Task;
  /// A training example.
  virtual Example sample(Generator& gen) const = 0;
  train::StepLoss step_loss(Runner& runner, int64_t batch, Generator& data, const dist::Slice& mine) const override;
  std::function<Tensor()> fixed_batch_loss(Runner& runner, int64_t size, Generator gen) const override;
};

/// "a gpt", "an encoder": a name with its article, for messages.
std::string with_article(const std::string& name);

/// The folder of the bundled data: share/qkv beside an installed program, else the source tree's cli/data.
std::string data_dir();

}  // namespace qkv::cli
