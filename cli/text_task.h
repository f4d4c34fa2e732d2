// Text, each token predicting the next: bytes (vocabulary 256), or the ids
// of a BPE tokenizer (a GPT-2 folder's). The first 90% trains, the rest is
// held out.
#pragma once

#include <memory>
#include <string>

#include "bpe.h"
#include "task.h"
#include "text_tokens.h"

namespace qkv::cli {

/// The largest --data file qkv reads (1 GiB).
inline constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

class TextTask : public Task {
 public:
  /// A byte model's text, or a BPE model's: one whose spec carries its tokenizer's files (bpe.h).
  TextTask(const TaskRow& row, const ModelSpec& spec);
  int64_t vocab() const override { return bpe_ ? bpe_->vocab_size() : 256; }
  void resolve(ModelSpec& spec, const KindRow& kind, bool read_data) override;
  /// Reads the text (`path`, or the bundled one for ""): at least 64 bytes,
  /// and a held-out tenth longer than the model's context.
  void use_data(const std::string& path, const ModelSpec& spec) override;

  train::StepLoss step_loss(Runner& runner, int64_t batch, Generator& data, const dist::Slice& mine) const override;
  std::function<Tensor()> fixed_batch_loss(Runner& runner, int64_t size, Generator gen) const override;
  train::Evaluation evaluate(Runner& runner, Generator& held_out, double target) const override;
  const char* metric_name() const override { return bpe_ ? "loss (nats/token)" : "loss (nats/byte)"; }
  void print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                  const Progress& progress) const override;

  Example prompt_example(const std::string& text, std::string* what) const override;
  std::vector<int64_t> prompt_tokens(const std::string& text) const override;
  Tensor example_loss(Runner& runner, const Example& e) const override;
  std::string example_prompt(Generator& gen) const override;
  void print_sample(Runner& runner, const std::string& prompt, const SampleOptions& options) const override;
  std::string token_text(int64_t id) const override {
    return bpe_ ? bpe_->token_bytes(id) : std::string(1, static_cast<char>(id));
  }
  std::string title(const ModelSpec& spec) const override;
  std::string describe(const ModelSpec& spec) const override;

 private:
  /// The text of one split, once read.
  const TextTokens& split(bool train) const;
  /// Held-out loss in nats per token over `windows` windows.
  double held_out_loss(Runner& runner, int64_t windows, Generator& gen, const Progress& progress) const;
  /// "byte" or "token": what the model predicts.
  const char* unit() const { return bpe_ ? "token" : "byte"; }
  /// The tokens of `text`.
  std::vector<int64_t> encode(const std::string& text) const;
  /// The text of `ids`.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::shared_ptr<const BpeTokenizer> bpe_;  // null for a byte model
  std::string path_;
  TextTokens train_, held_out_;
  int64_t context_ = 0;  // the model's, once resolved
};

std::unique_ptr<Task> make_text_task(const TaskRow& row, const ModelSpec& spec, bool read_data);

/// The text `qkv train --task text` uses without --data.
std::string default_text_path();

}  // namespace qkv::cli
