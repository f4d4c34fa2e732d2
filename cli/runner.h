// A model and the task it learns, built from a spec: the library's model of
// the spec's kind, driven through its row of the kind table (kinds.h), and
// the task from its row of the task table (task.h). Decoding is
// decoding.h's, the study of a prompt study.h's, evaluation each task's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drivers.h"
#include "kinds.h"
#include "model_spec.h"
#include "task.h"
#include "text_tokens.h"

namespace qkv::cli {

/// What building a model of `spec` checks and fills in, without building it:
/// the sizes, the attention kind, that its kind learns its task, and what the
/// spec leaves to the task (vocabulary, context, classes). Returns the task;
/// its data is read with `read_data` (never a path from a checkpoint). Errors
/// about a checkpoint's description name the file.
std::unique_ptr<Task> resolve_spec(ModelSpec& spec, bool read_data);

class Runner {
 public:
  /// Builds the model the spec describes (task and sizes checked). A model
  /// whose task reads a file (text, digits) reads it only with `read_data`:
  /// a model from a checkpoint samples without it. `check`, when given, sees
  /// the spec resolved (vocabulary, context, classes) before the model is
  /// built: a run it refuses builds no model.
  explicit Runner(ModelSpec spec, Generator* init = nullptr, bool read_data = true,
                  const std::function<void(const ModelSpec&)>& check = {});
  /// Drives `model`, built and loaded already (a GPT-2 folder's), which the
  /// spec describes; the task is resolved as above.
  Runner(ModelSpec spec, std::unique_ptr<nn::Module> model, bool read_data);
  /// Loads the data a text or digits model trains or evaluates on ("" for the bundled file).
  void use_data(const std::string& path);
  const ModelSpec& spec() const { return spec_; }
  const KindRow& kind() const { return kind_; }
  const Task& task() const { return *task_; }
  nn::Module& module();
  /// Moves the model to `device`; batches are then made there (its
  /// checkpoints are the same files whichever device wrote them).
  void to(Device device);
  Device device() const { return driver_->module().device(); }
  ModelDriver& driver() { return *driver_; }
  /// The driver as what a task family needs (a SequenceDriver, TextDriver or
  /// LabelDriver): the kind table promises it for every family the kind learns.
  template <class Ability> Ability& driver_as() {
    auto* ability = dynamic_cast<Ability*>(driver_.get());
    QKV_CHECK(ability, "the ", spec_.model, " model's driver lacks what the ", spec_.task, " task needs");
    return *ability;
  }

  /// Mean cross-entropy of a batch of examples (answer tokens only, padding ignored).
  Tensor loss(const std::vector<Example>& batch);
  /// Mean next-token cross-entropy over random windows of `text` (bytes or BPE ids). `batch`
  /// windows are drawn from `gen`; the loss covers windows [first, first +
  /// count) of them (count < 0: to the end), one rank's slice.
  Tensor text_loss(const TextTokens& text, int64_t batch, Generator& gen, int64_t first = 0, int64_t count = -1);
  /// The positions an example's loss averages over (a rank's share of a batch counts them).
  int64_t loss_positions(const Example& e) const { return driver_->loss_positions(e); }

  /// Adds lambda × the mean attention entropy (nn::attention_entropy over every
  /// layer and head; for Seq2Seq the decoder's) to loss() and text_loss().
  void set_attention_entropy(double lambda) { entropy_weight_ = lambda; }
  double attention_entropy_weight() const { return entropy_weight_; }
  /// The entropy term of the last loss computed (before the weight).
  double last_entropy() const { return last_entropy_; }

  /// Activation checkpointing for training: blocks recompute their forward in backward.
  void set_checkpoint_activations(bool on) { driver_->set_checkpoint_activations(on); }
  /// Whether attention may take the fused kernel (off: each step of it is an op, for qkv graph).
  void set_fused_attention(bool on) { driver_->set_fused_attention(on); }

  /// Whether generation keeps a key/value cache (on by default; not for
  /// linear attention). Off: every token recomputes the whole prefix.
  void set_use_cache(bool on) { use_cache_ = on; }
  bool uses_cache() const;
  /// A cache for `batch` sequences of up to `positions` tokens (at most the
  /// context), once its size is checked against this machine's memory; null
  /// where generation keeps none.
  std::unique_ptr<nn::KVCache> cache_for(int64_t batch, int64_t positions);

  /// Throws for a NaN or +inf among a model's outputs, or for a row (of
  /// `row` values) that is all -inf: weights that overflow float32.
  void check_outputs(const double* values, size_t n, size_t row) const;
  /// The error for a non-finite output `value`, naming the checkpoint.
  std::string not_finite(double value) const;

 private:
  Tensor with_entropy(const Tensor& loss, const std::vector<Tensor>& weights);
  ModelSpec spec_;
  const KindRow& kind_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<ModelDriver> driver_;  // what this kind of model does (drivers.h)
  bool use_cache_ = true;
  double entropy_weight_ = 0, last_entropy_ = 0;
};

}  // namespace qkv::cli
