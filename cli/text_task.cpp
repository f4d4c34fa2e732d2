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

std::unique_ptr<Task> make_text_task(const TaskRow& row, const ModelSpec& spec, bool) {
  return std::make_unique<TextTask>(row, spec);  // resolve() reads the text, once the context is known
}

TextTask::TextTask(const TaskRow& row, const ModelSpec& spec) : Task(row) {
  if (!spec.tokenizer_files.empty())
    bpe_ = std::make_shared<const BpeTokenizer>(
        BpeTokenizer::from_files(spec.tokenizer_files, printable(spec.source.empty() ? spec.tokenizer : spec.source)));
}

namespace {

// A BPE model's text as int32 ids, encoded a megabyte at a time: each chunk ends just after a line break that
// a non-space follows, where GPT-2's pattern always ends a piece, so the ids are those of the whole text.
std::vector<int32_t> encode_in_chunks(const BpeTokenizer& bpe, const std::string& text) {
  std::vector<int32_t> ids;
  auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  for (size_t begin = 0; begin < text.size();) {
    size_t end = std::min(text.size(), begin + (size_t{1} << 20));
    while (end < text.size() && !(text[end - 1] == '\n' && !is_space(text[end]))) ++end;
    for (int64_t id : bpe.encode(std::string_view(text).substr(begin, end - begin)))
      ids.push_back(static_cast<int32_t>(id));
    begin = end;
  }
  return ids;
}

}  // namespace

std::vector<int64_t> TextTask::encode(const std::string& text) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<int64_t> ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string TextTask::decode(const std::vector<int64_t>& ids) const {
  if (bpe_) return bpe_->decode(ids);
  std::string text;
  for (int64_t id : ids) text += static_cast<char>(id);
  return text;
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
  const TextTokens tokens = bpe_ ? TextTokens(encode_in_chunks(*bpe_, text)) : TextTokens(std::move(text));
  const int64_t at = tokens.size() * 9 / 10;
  train_ = tokens.slice(0, at);
  held_out_ = tokens.slice(at, tokens.size());
  QKV_CHECK(held_out_.size() > spec.context, "--data file '", printable(path_), "' is too short for a context of ",
            spec.context, ": its held-out tenth has ", held_out_.size(), " ", unit(), "s");
}

const TextTokens& TextTask::split(bool train) const {
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
  std::snprintf(text, sizeof text, "held-out loss %.3f (%.3f bits/%s)", e.metric, e.metric / std::log(2.0), unit());
  e.text = text;
  return e;
}

void TextTask::print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                          const Progress& progress) const {
  // A file's context sizes the windows: 2^18 once asked for 8.6 GB of logits with no estimate.
  const int64_t at_once = std::min<int64_t>(32, count);  // held_out_loss's batches
  if (runner.device().is_cpu())
    check_fits_in_memory(forward_bytes(runner.spec(), at_once),
                         cat(printable(path), ": its loss on ", at_once, " windows of ", runner.spec().context, " ",
                             unit(), "s at a time"),
                         "evaluate it on a machine with more memory");
  double loss = held_out_loss(runner, count, gen, progress);
  std::printf("%s: held-out loss %.4f nats/%s = %.4f bits/%s over %lld window%s of %lld %ss", printable(path).c_str(),
              loss, unit(), loss / std::log(2.0), unit(), static_cast<long long>(count), count == 1 ? "" : "s",
              static_cast<long long>(runner.spec().context), unit());
  if (bpe_) {  // the token model's usual figure, and one to compare with a byte model's
    int64_t bytes = 0;
    for (int64_t i = 0; i < held_out_.size(); ++i)
      bytes += static_cast<int64_t>(bpe_->token_bytes(held_out_[i]).size());
    const double per_byte =
        loss * static_cast<double>(held_out_.size()) / static_cast<double>(std::max<int64_t>(bytes, 1));
    std::printf(" (perplexity %.2f); %.4f nats/byte at the held-out text's %.2f bytes a token", std::exp(loss),
                per_byte, static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(held_out_.size(), 1)));
  }
  std::printf("\n");
}

// Next-token prediction: the tokens, and each one's successor.
Example TextTask::prompt_example(const std::string& text, std::string* what) const {
  const std::vector<int64_t> ids = encode(text);
  const int64_t n = static_cast<int64_t>(ids.size());
  QKV_CHECK(n >= 2, "the text needs at least 2 ", unit(), "s (one prediction)", bpe_ ? cat("; it has ", n) : "");
  int64_t T = std::min<int64_t>(n - 1, context_);
  Example e;
  e.input.assign(ids.begin(), ids.begin() + T);
  e.answer.assign(ids.begin() + 1, ids.begin() + T + 1);
  // A longer text is cut to the context, and says so (it once was, silently).
  if (what)
    *what = cat("mean next-", unit(), " cross-entropy over ", T, " predictions",
                T + 1 < n ? cat(" (the first ", T + 1, " of its ", n, " ", unit(), "s: the model's context is ", T, ")")
                          : std::string());
  return e;
}

std::vector<int64_t> TextTask::prompt_tokens(const std::string& text) const { return encode(text); }

// A few words of the held-out text from a random word's start, its line breaks and other control bytes as spaces.
std::string TextTask::example_prompt(Generator& gen) const {
  const TextTokens& held_out = split(false);
  // The text to pick from: a byte model's held-out bytes, or some 64 held-out tokens of a BPE model's.
  TextTokens decoded;
  const TextTokens& bytes = bpe_ ? decoded : held_out;
  if (bpe_) {
    const int64_t at =
        static_cast<int64_t>(gen.below(static_cast<uint64_t>(std::max<int64_t>(1, held_out.size() - 64))));
    std::vector<int64_t> ids;
    for (int64_t i = at; i < std::min(held_out.size(), at + 64); ++i) ids.push_back(held_out[i]);
    decoded = TextTokens(decode(ids));
  }
  auto text = [&](int64_t from) {  // up to 24 bytes from `from`
    std::string out;
    for (int64_t i = from; i < std::min(bytes.size(), from + 24); ++i) out += static_cast<char>(bytes[i]);
    return out;
  };
  int64_t at = static_cast<int64_t>(gen.below(static_cast<uint64_t>(bytes.size())));
  while (at > 0 && bytes[at - 1] != ' ' && bytes[at - 1] != '\n') --at;
  std::string words = text(at);
  for (char& c : words)
    if (static_cast<unsigned char>(c) < 32) c = ' ';
  while (!words.empty() && words.back() == ' ') words.pop_back();
  return words.size() >= 2 ? words : text(0);
}

Tensor TextTask::example_loss(Runner& runner, const Example& e) const {
  const int64_t T = static_cast<int64_t>(e.input.size());
  return runner.driver_as<TextDriver>().text_loss(
      Tensor::from_vector(e.input, {1, T}), Tensor::from_vector(e.answer, {1, static_cast<int64_t>(e.answer.size())}),
      nullptr);
}

void TextTask::print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const {
  // Bytes as generated, NUL bytes included (printf would stop at the first).
  // To a terminal, control bytes other than newlines and tabs are shown
  // escaped (\x1b): a prompt or a sample must not move the cursor or set
  // the window's title. Into a pipe or a file the bytes stay as they are.
  std::string out = prompt + decode(decoding::continue_text(runner, encode(prompt), options.max_new,
                                                            options.temperature, options.top_k, *options.gen));
  if (isatty(fileno(stdout))) out = escape_control_bytes(out, /*keep_lines=*/true);
  out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

std::string TextTask::title(const ModelSpec& spec) const {
  if (bpe_ && spec.data.empty()) return cat("text (bundled) in ", bpe_->vocab_size(), " BPE tokens");
  return "text " + (spec.data.empty() ? std::string("(bundled)") : printable(spec.data));
}

std::string TextTask::describe(const ModelSpec& spec) const {
  if (bpe_)
    return cat("text in ", bpe_->vocab_size(), " BPE tokens, the tokenizer of '", printable(spec.tokenizer), "'",
               spec.data.empty() ? "" : cat(", trained on '", printable(spec.data), "'"));
  return cat("text, trained on ", spec.data.empty() ? "the bundled text" : ("'" + printable(spec.data) + "'"));
}

}  // namespace qkv::cli
