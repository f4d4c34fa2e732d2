// What the qkv program does with each kind of model, in one table. A new
// kind is an entry in nn/model_kinds.cpp (its fields, bounds, formula and
// builder) and a driver here (its losses, decoding and attention maps),
// listed in kDrivers at the end of drivers.cpp; Runner asks only this.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "label_tasks.h"
#include "nn/nn.h"
#include "tasks.h"

namespace qkv::cli {

class Runner;
struct AttentionMap;

class ModelDriver {
 public:
  virtual ~ModelDriver() = default;
  virtual nn::Module& module() = 0;
  virtual void set_checkpoint_activations(bool on) = 0;
  virtual void set_fused_attention(bool on) = 0;
  /// Mean cross-entropy of a task batch's answers and end marks (teacher
  /// forcing); `weights`, when given, collects every attention map.
  virtual Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) = 0;
  /// Next-byte logits [B, T, 256] of byte sequences [B, T] (text kinds).
  virtual Tensor text_logits(const Tensor& ids, std::vector<Tensor>* weights) = 0;
  /// Whether generation can keep keys and values (make_cache() gives a cache).
  virtual bool keeps_cache() const = 0;
  /// A key/value cache for `batch` sequences of up to `positions` tokens, or
  /// null for a kind that keeps none.
  virtual std::unique_ptr<nn::KVCache> make_cache(int64_t batch, int64_t positions) = 0;
  /// Logits of new tokens `ids` at the cache's next positions (the cache then holds them).
  virtual Tensor cached_logits(const Tensor& ids, nn::KVCache& cache) = 0;
  /// Decoding task inputs of one length: the sequence each row's decoder
  /// starts from, and a step function from the tokens not fed yet
  /// ([B, new]) to their logits ([B, new, V]).
  virtual std::vector<int64_t> decoder_start(const std::vector<int64_t>& input) const = 0;
  virtual std::function<Tensor(const Tensor&)> decoder(const std::vector<std::vector<int64_t>>& inputs,
                                                       nn::KVCache* cache) = 0;
  /// Every attention map on a prompt, drawn as the kind attends.
  virtual std::vector<AttentionMap> attention(Runner& runner, const std::string& prompt) = 0;
  /// The loss of one example (as task_loss scores it; for a text model its
  /// bytes and their successors) with every attention map of that forward in
  /// call order, each map's weights [1, heads, rows, cols] still in the graph.
  virtual Tensor study(Runner& runner, const Example& e, std::vector<AttentionMap>& maps) = 0;
  /// Label kinds: each example's scores over the task's labels, [B, labels]
  /// (class logits, or the scores of the item after the whole history).
  virtual Tensor label_scores(const std::vector<Example>& batch);
  /// The positions an example's loss averages over (a rank's share of a batch counts them).
  virtual int64_t loss_positions(const Example& e) const { return static_cast<int64_t>(e.answer.size()) + 1; }
};

/// One row of the table: what the program knows of a kind before its model exists.
struct DriverKind {
  const char* name;
  const char* title;        // for pictures: "GPT"
  const char* layers_are;   // what --layers counts, after the number: "" or " per side"
  double blocks_per_layer;  // transformer blocks one layer holds, for memory estimates
  const char* maps_note;    // what `qkv attention` says of the kind's maps, after its general text
  const char* tasks;        // the tasks it learns, the first its default: "brackets" or "copy, reverse, ..."
  /// The context a sequence task needs: its input, its answer and the marks the kind reads.
  int64_t (*context_for)(const SequenceTask& task);
  /// A label kind's context for its task (null for the sequence kinds).
  int64_t (*label_context)(const nn::ModelShape& shape, const LabelTask& task);
  /// The driver of a model the registry built.
  std::unique_ptr<ModelDriver> (*make)(std::unique_ptr<nn::Module> model);
};

/// Token ids or targets, made on the host, as an int64 tensor of `shape` on the model's device.
Tensor ids_for(const nn::Module& model, const std::vector<int64_t>& ids, const Shape& shape);

/// The row of `kind`; throws for a kind the program has no driver for.
const DriverKind& driver_kind(const std::string& kind);
/// The kinds the program drives, "gpt, seq2seq, ...", and whether `kind` is one.
std::string driver_kind_names();
bool is_driver_kind(const std::string& kind);
/// Whether `kind` learns `task` (its row's list).
bool learns(const DriverKind& kind, const std::string& task);
/// The kind a task trains when --model is not given.
std::string default_kind(const std::string& task);

}  // namespace qkv::cli
