// What every qkv command shares: a model (any kind in drivers.h) built from a spec,
// its checkpoint form, batches for the tasks, decoding and evaluation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bounds.h"
#include "drivers.h"
#include "nn/checkpoint.h"
#include "nn/model_kinds.h"
#include "nn/nn.h"
#include "tasks.h"

namespace qkv::cli {

/// Everything needed to rebuild a model, travelling in the checkpoint's
/// metadata: the model's kind and shape (nn/model_kinds.h owns their fields,
/// bounds and parameter count) and the task it learns.
struct ModelSpec : nn::ModelShape {
  std::string model = "gpt";  // a kind in nn::model_kind_names()
  std::string task = "reverse";
  int64_t max_len = 8, digits = 3;  // sequence tasks, brackets and sessions (max_len)
  std::string data;                 // text and digits: the --data file, "" for the bundled one
  std::string source;               // the checkpoint it was read from ("" from flags): errors name it
  int64_t example_tokens = 0;       // positions one example feeds (the Runner sets it: the task's, or the context)
  std::map<std::string, std::string> metadata() const;
  /// Parses and bounds a checkpoint's description (one-line errors naming `path`).
  static ModelSpec from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);
  /// The parameter count of the model this spec builds (the kind's formula).
  int64_t parameter_count() const;
  /// Flags' sizes against the bounds loading applies to a file's: one-line
  /// errors naming the flag. Context 0 means "what the task needs".
  void check_sizes() const;
  /// Throws unless the file's model tensors hold exactly parameter_count()
  /// elements: run before building, so the file's size bounds the model's.
  void check_tensors(const io::TensorFile& file, const std::string& path) const;
};

/// A small model of `kind` (width 8, 2 heads, 2 layers) on the kind's first
/// task, short inputs: what gradcheck and graph build fresh.
ModelSpec small_model_spec(const std::string& kind);

/// One layer's attention weights for one input, ready to draw.
struct AttentionMap {
  std::string name;                     // "layer 0", "decoder layer 1, cross-attention", ...
  std::string file;                     // a file-name stem: "layer0", "decoder1_cross"
  Tensor weights;                       // [heads, rows, cols]
  std::vector<std::string> rows, cols;  // token labels: queries down, keys across
  int64_t split = -1;                   // > 0: where the answer starts (on both axes)
  bool cls_first = false;               // row and column 0 are a classifier's [CLS] token
  bool causal = false;                  // a query sees no later key (masked cells: those past the diagonal)
  std::vector<double> image;            // a ViT's input image in [0, 1], row-major, under the [CLS] row's grid
  int64_t image_side = 0, patch = 0;    // its side and the patch side (columns 1.. are its patches, row-major)
};

/// A prompt's loss with the attention maps of the forward that computed it:
/// each map's weights [1, heads, rows, cols] keep their graph and retain
/// their gradient, so after loss.backward() weights.grad() is dL/dP.
struct Study {
  Tensor loss;
  std::string what;  // what the loss measures
  std::vector<AttentionMap> maps;
};

/// How well a label model does on held-out examples.
struct LabelMetrics {
  int64_t examples = 0;
  bool ranks = false;                             // items ranked (sessions) rather than classes counted
  double accuracy = 0;                            // classes: the share classified right
  int64_t labels = 0;                             // classes: the confusion matrix's side
  std::vector<int64_t> confusion;                 // classes: [true label][predicted label], row-major
  double hit_rate = 0, ndcg = 0;                  // items: the held-out item among the model's top 10, and its NDCG@10
  double popular_hit_rate = 0, popular_ndcg = 0;  // the same for the 10 most popular items (the baseline)
  /// The held-out metric training watches: accuracy, or HR@10.
  double metric() const { return ranks ? hit_rate : accuracy; }
};

/// training_step_bytes for this model and `batch` examples of example_tokens
/// positions (a text window: the context), each layer's attention weights
/// counted (2 a head per token): a high estimate of a forward pass too.
double training_bytes(const ModelSpec& s, int64_t batch);

/// Bytes a no-grad forward of `batch` windows of the context needs beyond
/// the loaded model, roughly: the logits and their softmax, a layer's
/// activations (the fused attention keeps no n x n scores).
double forward_bytes(const ModelSpec& s, int64_t batch);

class Runner {
 public:
  /// Builds the model the spec describes (task and sizes checked). A text
  /// model reads its text (spec.data; "" for the bundled text) only with
  /// `read_text`: a model from a checkpoint samples without it. `check`,
  /// when given, sees the spec resolved (vocabulary, context, classes) before
  /// the model is built: a run it refuses builds no model.
  explicit Runner(ModelSpec spec, Generator* init = nullptr, bool read_text = true,
                  const std::function<void(const ModelSpec&)>& check = {});
  /// Loads the data a text or digits model trains or evaluates on ("" for the bundled file).
  void use_data(const std::string& path);
  const ModelSpec& spec() const { return spec_; }
  nn::Module& module();
  /// Moves the model to `device`; batches are then made there (its
  /// checkpoints are the same files whichever device wrote them).
  void to(Device device);
  Device device() const { return driver_->module().device(); }
  /// The sequence task (copy, reverse, sort, add), or null.
  const SequenceTask* task() const { return task_.get(); }
  /// The label task (brackets, digits, sessions), or null.
  const LabelTask* label_task() const { return labels_.get(); }
  /// A training example of the sequence or label task.
  Example draw(Generator& gen) const;
  /// The positions an example's loss averages over (a rank's share of a batch counts them).
  int64_t loss_positions(const Example& e) const;

  /// Mean cross-entropy of a batch of examples (answer tokens only, padding ignored).
  Tensor loss(const std::vector<Example>& batch);
  /// Mean next-byte cross-entropy over random windows of the text's split.
  /// `batch` windows are drawn from `gen`; the loss covers windows
  /// [first, first + count) of them (count < 0: to the end), one rank's slice.
  Tensor text_loss(const std::string& split, int64_t batch, Generator& gen, int64_t first = 0, int64_t count = -1);
  /// The loss on one batch of `size` drawn from a copy of `gen`, the same batch
  /// at every call: what a gradient check evaluates over and over.
  std::function<Tensor()> fixed_batch_loss(int64_t size, Generator gen);
  /// Logits of a GPT for byte sequences [B, T].
  Tensor forward_gpt(const Tensor& ids, std::vector<Tensor>* weights = nullptr) const;

  /// Answers for inputs (batched by length); temperature 0 is greedy.
  std::vector<std::vector<int64_t>> answer(const std::vector<std::vector<int64_t>>& inputs, double temperature = 0,
                                           int64_t top_k = 0, Generator* gen = nullptr);
  /// Continues a byte prompt by max_new bytes (text task).
  std::string continue_text(const std::string& prompt, int64_t max_new, double temperature, int64_t top_k,
                            Generator& gen);
  /// Called by accuracy, held_out_loss and evaluate_labels after each chunk
  /// with how many of their examples (or windows) are done, and of how many.
  std::function<void(int64_t done, int64_t total)> on_progress;
  /// Exact-match accuracy on `count` fresh examples from `gen`.
  double accuracy(int64_t count, Generator& gen);
  /// Held-out loss in nats per byte over `windows` windows (text task).
  double held_out_loss(int64_t windows, Generator& gen);
  /// A label model on up to `count` held-out examples (label tasks).
  LabelMetrics evaluate_labels(int64_t count, Generator& gen);
  /// The k likeliest labels for one example, with their probabilities (the
  /// softmax of the scores; for items, over the items, padding excluded).
  std::vector<std::pair<int64_t, double>> top_labels(const Example& e, int64_t k);

  /// Adds lambda × the mean attention entropy (nn::attention_entropy over every
  /// layer and head; for Seq2Seq the decoder's) to loss() and text_loss().
  void set_attention_entropy(double lambda) { entropy_weight_ = lambda; }
  /// The entropy term of the last loss computed (before the weight).
  double last_entropy() const { return last_entropy_; }

  /// Activation checkpointing for training: blocks recompute their forward in backward.
  void set_checkpoint_activations(bool on);
  /// Whether attention may take the fused kernel (off: each step of it is an op, for qkv graph).
  void set_fused_attention(bool on);

  /// Whether GPT generation keeps a key/value cache (on by default; not for
  /// linear attention). Off: every token recomputes the whole prefix.
  void set_use_cache(bool on) { use_cache_ = on; }
  bool uses_cache() const;
  /// A cache for `batch` sequences of up to `positions` tokens (at most the
  /// context), once its size is checked against this machine's memory; null
  /// where generation keeps none.
  std::unique_ptr<nn::KVCache> cache_for(int64_t batch, int64_t positions);

  /// Every attention map of the model on a prompt (for a task model: the
  /// prompt and the model's own answer). A GPT gives one per layer; a
  /// Seq2Seq the encoder's self-attention, the decoder's self-attention and
  /// its cross-attention to the source, per layer.
  std::vector<AttentionMap> attention(const std::string& prompt);
  /// The example a prompt's loss scores: a task input with its correct
  /// answer (teacher forcing), a labelled input, a history predicting each
  /// next item, or a text's bytes (input) and each one's successor (answer).
  /// `what` receives a description of the loss.
  Example prompt_example(const std::string& text, std::string* what = nullptr) const;
  /// The prompt's loss and every attention map of its forward, ready for
  /// loss.backward() (asking for the weights takes the composed attention path).
  Study study(const std::string& prompt);

 private:
  /// The task, and what the spec leaves to it (vocabulary, context,
  /// classes), checked against the spec; reads the text or images only when
  /// `read_data`.
  void resolve_task(bool read_data);
  Tensor with_entropy(const Tensor& loss, const std::vector<Tensor>& weights);
  int64_t pick(const std::vector<double>& logits, double temperature, int64_t top_k, Generator* gen) const;
  /// Throws not_finite() for a NaN or +inf among a model's outputs, or for a
  /// row (of `row` values) that is all -inf.
  void check_outputs(const double* values, size_t n, size_t row) const;
  /// The error for a non-finite output `value`, naming the checkpoint.
  std::string not_finite(double value) const;
  ModelSpec spec_;
  std::unique_ptr<SequenceTask> task_;
  std::unique_ptr<LabelTask> labels_;
  std::unique_ptr<TextTask> text_;
  std::unique_ptr<ModelDriver> driver_;  // what this kind of model does (drivers.h)
  bool use_cache_ = true;
  double entropy_weight_ = 0, last_entropy_ = 0;
};

}  // namespace qkv::cli
