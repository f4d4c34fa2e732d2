#include "text_task.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "bounds.h"
#include "decoding.h"
#include "io/safetensors.h"
#include "model_spec.h"
#include "runner.h"

namespace qkv::cli {

std::unique_ptr<Task> make_text_task(const TaskRow& row, const ModelSpec&, bool) {
  return std::make_unique<TextTask>(row);  // resolve() reads the text, once the context is known
}

std::string default_text_path() { return data_dir() + "/text.txt"; }

void TextTask::resolve(ModelSpec& spec, const KindRow&, bool read_data) {
  take_vocab(spec);
  if (spec.context <= 0) spec.context = 64;
  context_ = spec.context;
  if (read_data) use_data(spec.data, spec);
}

void TextTask::use_data(const std::string& path, const ModelSpec& spec) {
  path_ = path.empty() ? default_text_path() : path;
  std::string text = io::read_regular_file(path_, kMaxTextBytes, "--data file");  // it keeps the whole text in memory
  QKV_CHECK(text.size() >= 64, "--data file '", printable(path_), "' holds ", text.size(),
            text.size() == 1 ? " byte" : " bytes", "; a text model's data needs at least 64");
  size_t at = text.size() * 9 / 10;
  train_ = text.substr(0, at);
  held_out_ = text.substr(at);
  QKV_CHECK(static_cast<int64_t>(held_out_.size()) > spec.context, "--data file '", printable(path_),
            "' is too short for a context of ", spec.context, ": its held-out tenth has ", held_out_.size(), " bytes");
}

const std::string& TextTask::split(bool train) const {
  QKV_CHECK(!path_.empty(), "this text model has no text loaded (--data FILE)");
  return train ? train_ : held_out_;
}

train::StepLoss TextTask::step_loss(Runner& runner, int64_t batch, Generator& data, const dist::Slice& mine) const {
  train::StepLoss part;
  part.loss = runner.text_loss(split(true), batch, data, mine.first, mine.count);
  part.share = static_cast<double>(mine.count) / static_cast<double>(batch);
  part.tokens = batch * runner.spec().context;
  return part;
}

std::function<Tensor()> TextTask::fixed_batch_loss(Runner& runner, int64_t size, Generator gen) const {
  return [this, &runner, size, gen] {
    Generator replay = gen;  // the same windows every time
    return runner.text_loss(split(true), size, replay);
  };
}

double TextTask::held_out_loss(Runner& runner, int64_t windows, Generator& gen, const Progress& progress) const {
  NoGradGuard no_grad;
  bool was_training = runner.module().is_training();
  runner.module().eval();
  double total = 0, entropy_weight = runner.attention_entropy_weight();
  runner.set_attention_entropy(0);  // the held-out loss is the plain cross-entropy
  // Batches of 32 windows, the last of what is left: --examples 1 once scored 32 windows and said 1.
  for (int64_t done = 0; done < windows;) {
    const int64_t size = std::min<int64_t>(32, windows - done);
    total += runner.text_loss(split(false), size, gen).item() * static_cast<double>(size);
    done += size;
    if (progress) progress(done, windows, "windows");
  }
  runner.set_attention_entropy(entropy_weight);
  runner.module().train(was_training);
  QKV_CHECK(std::isfinite(total), runner.not_finite(total));
  return total / static_cast<double>(windows);
}

// The loss over 64 windows, the same at every evaluation.
train::Evaluation TextTask::evaluate(Runner& runner, Generator& held_out, double) const {
  train::Evaluation e;
  e.metric = held_out_loss(runner, 64, held_out, {});
  e.higher_is_better = false;
  char text[64];
  std::snprintf(text, sizeof text, "held-out loss %.3f (%.3f bits/byte)", e.metric, e.metric / std::log(2.0));
  e.text = text;
  return e;
}

void TextTask::print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                          const Progress& progress) const {
  // A file's context sizes the windows: 2^18 once asked for 8.6 GB of logits with no estimate.
  const int64_t at_once = std::min<int64_t>(32, count);  // held_out_loss's batches
  if (runner.device().is_cpu())
    check_fits_in_memory(
        forward_bytes(runner.spec(), at_once),
        cat(printable(path), ": its loss on ", at_once, " windows of ", runner.spec().context, " bytes at a time"),
        "evaluate it on a machine with more memory");
  double loss = held_out_loss(runner, count, gen, progress);
  std::printf("%s: held-out loss %.4f nats/byte = %.4f bits/byte over %lld window%s of %lld bytes\n",
              printable(path).c_str(), loss, loss / std::log(2.0), static_cast<long long>(count), count == 1 ? "" : "s",
              static_cast<long long>(runner.spec().context));
}

// Next-byte prediction: the bytes, and each one's successor.
Example TextTask::prompt_example(const std::string& text, std::string* what) const {
  QKV_CHECK(text.size() >= 2, "the text needs at least 2 bytes (one prediction)");
  int64_t T = std::min<int64_t>(static_cast<int64_t>(text.size()) - 1, context_);
  Example e;
  for (int64_t t = 0; t < T; ++t) {
    e.input.push_back(static_cast<unsigned char>(text[t]));
    e.answer.push_back(static_cast<unsigned char>(text[t + 1]));
  }
  // A longer text is cut to the context, and says so (it once was, silently).
  if (what)
    *what = cat("mean next-byte cross-entropy over ", T, " predictions",
                T + 1 < static_cast<int64_t>(text.size())
                    ? cat(" (the first ", T + 1, " of its ", text.size(), " bytes: the model's context is ", T, ")")
                    : std::string());
  return e;
}

std::vector<int64_t> TextTask::prompt_tokens(const std::string& text) const {
  std::vector<int64_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// A few words of the held-out text from a random word's start, its line breaks and other control bytes as spaces.
std::string TextTask::example_prompt(Generator& gen) const {
  const std::string& text = split(false);
  size_t at = static_cast<size_t>(gen.below(text.size()));
  while (at > 0 && text[at - 1] != ' ' && text[at - 1] != '\n') --at;
  std::string words = text.substr(at, 24);
  for (char& c : words)
    if (static_cast<unsigned char>(c) < 32) c = ' ';
  while (!words.empty() && words.back() == ' ') words.pop_back();
  return words.size() >= 2 ? words : text.substr(0, 24);
}

Tensor TextTask::example_loss(Runner& runner, const Example& e) const {
  const int64_t T = static_cast<int64_t>(e.input.size());
  return nn::cross_entropy(runner.driver_as<TextDriver>().text_logits(Tensor::from_vector(e.input, {1, T}), nullptr),
                           Tensor::from_vector(e.answer, {1, static_cast<int64_t>(e.answer.size())}));
}

void TextTask::print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const {
  // Bytes as generated, NUL bytes included (printf would stop at the first).
  // To a terminal, control bytes other than newlines and tabs are shown
  // escaped (\x1b): a prompt or a sample must not move the cursor or set
  // the window's title. Into a pipe or a file the bytes stay as they are.
  std::string out = prompt + decoding::continue_text(runner, prompt, options.max_new, options.temperature,
                                                     options.top_k, *options.gen);
  if (isatty(fileno(stdout))) out = escape_control_bytes(out, /*keep_lines=*/true);
  out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

std::string TextTask::title(const ModelSpec& spec) const {
  return "text " + (spec.data.empty() ? std::string("(bundled)") : printable(spec.data));
}

std::string TextTask::describe(const ModelSpec& spec) const {
  return cat("text, trained on ", spec.data.empty() ? "the bundled text" : ("'" + printable(spec.data) + "'"));
}

}  // namespace qkv::cli
