// The task table, and what the task families share.
#include "task.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "autograd/error.h"
#include "label_tasks.h"
#include "model_spec.h"
#include "runner.h"
#include "sequence_task.h"
#include "text_task.h"

namespace qkv::cli {

namespace {

// Each task's defaults, where they differ from the sequence tasks'. The
// bundled text is small (28 KB): fewer, smaller steps and dropout keep the
// held-out loss falling instead of memorising the training part. Two layers
// stalled near 95% on brackets; four, at 2e-3, passed 99% within 2,000 steps.
// The digits are 1,438 training images: dropout, and every step until the
// budget (their held-out split is the test set: no target stops on it by
// default). Sessions: 1,000 users, and longer runs overfit.
const std::vector<TaskRow> kTasks = {
    {"copy", TaskFamily::Sequence, {}, "input", false, nullptr, nullptr, false, true, make_copy_task},
    {"reverse", TaskFamily::Sequence, {}, "input", false, nullptr, nullptr, false, true, make_reverse_task},
    {"sort", TaskFamily::Sequence, {}, "input", false, nullptr, nullptr, false, true, make_sort_task},
    {"add", TaskFamily::Sequence, {}, nullptr, true, nullptr, nullptr, false, true, make_add_task},
    {"text",
     TaskFamily::Text,
     {.batch = 32, .eval_every = 100, .steps = 800, .lr = 0.003, .dropout = 0.2},
     nullptr,
     false,
     "the text for --task text",
     "text",
     false,
     false,
     make_text_task},
    {"brackets",
     TaskFamily::TokenLabel,
     {.steps = 6000, .max_len = 12, .layers = 4, .lr = 0.002, .target = 0.995},
     "input",
     false,
     nullptr,
     nullptr,
     false,
     true,
     make_brackets_task},
    {"digits",
     TaskFamily::ImageLabel,
     {.batch = 128, .eval_every = 500, .steps = 4000, .dropout = 0.1, .target = 1.0},
     nullptr,
     false,
     "the image CSV for digits",
     "CSV",
     true,
     true,
     make_digits_task},
    {"sessions",
     TaskFamily::NextItem,
     {.steps = 800, .max_len = 20, .dropout = 0.1, .target = 1.0},
     "history",
     false,
     nullptr,
     nullptr,
     false,
     true,
     make_sessions_task},
};

// The number of examples a rank's slice of a batch averages its loss over (answer and EOS tokens, one label,
// or a history's next items), for its share of the global batch.
int64_t loss_tokens(const Runner& runner, const std::vector<Example>& examples, int64_t first, int64_t count) {
  int64_t n = 0;
  for (int64_t i = first; i < first + count; ++i) n += runner.loss_positions(examples[i]);
  return n;
}

}  // namespace

const std::vector<TaskRow>& task_table() { return kTasks; }

std::string task_names(const std::function<bool(const TaskRow&)>& pick, const char* last) {
  std::vector<std::string> names;
  for (const TaskRow& t : kTasks)
    if (pick(t)) names.push_back(t.name);
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
  return text;
}

bool is_task(const std::string& name) {
  return std::any_of(kTasks.begin(), kTasks.end(), [&](const TaskRow& t) { return name == t.name; });
}

const TaskRow& task_row(const std::string& name) {
  for (const TaskRow& t : kTasks)
    if (name == t.name) return t;
  throw Error(
      cat("unknown task '", printable(name), "' (", task_names([](const TaskRow&) { return true; }, ", "), ")"));
}

void Task::use_data(const std::string&, const ModelSpec&) {
  throw Error(cat("--data is for ", task_names([](const TaskRow& t) { return t.data_is != nullptr; }, " and "),
                  " models; this is ", with_article(name()), " model"));
}

void Task::take_vocab(ModelSpec& spec) const {
  QKV_CHECK(spec.vocab == 0 || spec.vocab == vocab(), "vocab ", spec.vocab, " for the ", name(),
            " task, whose vocabulary is ", vocab());
  spec.vocab = vocab();
}

Tensor Task::example_loss(Runner& runner, const Example& e) const { return runner.loss({e}); }

// The whole global batch is drawn on every rank, so the data stream stays
// shared, and each takes its slice, its loss weighted by its share of the
// loss terms.
train::StepLoss ExampleTask::step_loss(Runner& runner, int64_t batch, Generator& data, const dist::Slice& mine) const {
  train::StepLoss part;
  std::vector<Example> examples;
  for (int64_t b = 0; b < batch; ++b) {
    examples.push_back(sample(data));
    part.tokens += static_cast<int64_t>(examples.back().input.size() + examples.back().answer.size() + 2);
  }
  if (dist::world_size() > 1) {
    part.share = static_cast<double>(loss_tokens(runner, examples, mine.first, mine.count)) /
                 loss_tokens(runner, examples, 0, batch);
    examples = std::vector<Example>(examples.begin() + mine.first, examples.begin() + mine.first + mine.count);
  }
  part.loss = runner.loss(examples);
  return part;
}

std::function<Tensor()> ExampleTask::fixed_batch_loss(Runner& runner, int64_t size, Generator gen) const {
  std::vector<Example> batch;
  for (int64_t i = 0; i < size; ++i) batch.push_back(sample(gen));
  return [&runner, batch] { return runner.loss(batch); };
}

std::string with_article(const std::string& name) {
  const bool vowel = !name.empty() && std::strchr("aeiouAEIOU", name[0]);
  return (vowel ? "an " : "a ") + name;
}

std::string data_dir() {
  // An installed program (<prefix>/bin/qkv) reads <prefix>/share/qkv; one in a build tree, the source's.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed = exe.parent_path().parent_path() / QKV_INSTALLED_DATA_DIR;
    if (std::filesystem::is_regular_file(installed / "text.txt", ec)) return installed.string();
  }
  return QKV_DATA_DIR;
}

}  // namespace qkv::cli
