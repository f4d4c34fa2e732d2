// What the program does with each kind of model: its loss on a batch of
// examples, its attention maps, and what its families need. Every driver
// answers ModelDriver; a kind that decodes task answers is also a
// SequenceDriver, one that reads text a TextDriver, one that scores labels
// a LabelDriver. The kind table (kinds.h) says which families a kind
// learns, and so which of these its driver is: nothing is answered by
// throwing.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/nn.h"
#include "study/study.h"
#include "task.h"

namespace qkv::cli {

class Runner;
using study::AttentionMap;

class ModelDriver {
 public:
  virtual ~ModelDriver() = default;
  virtual nn::Module& module() = 0;
  virtual void set_checkpoint_activations(bool on) = 0;
  virtual void set_fused_attention(bool on) = 0;
  /// Mean cross-entropy of a batch of examples (teacher forcing);
  /// `weights`, when given, collects every attention map.
  virtual Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) = 0;
  /// The positions an example's loss averages over (a rank's share of a batch counts them).
  virtual int64_t loss_positions(const Example& e) const { return static_cast<int64_t>(e.answer.size()) + 1; }
  /// Every attention map on a prompt, drawn as the kind attends.
  virtual std::vector<AttentionMap> attention(Runner& runner, const std::string& prompt) = 0;
  /// The loss of one example (as task_loss scores it; for a text model its
  /// bytes and their successors): the forward a study records.
  virtual Tensor study_loss(Runner& runner, const Example& e) = 0;
  /// That forward's attention weights (nn::AttentionRecording's, in call
  /// order, each [1, heads, rows, cols] still in the graph) as maps, named
  /// and labelled as the kind reads the example.
  virtual std::vector<AttentionMap> study_maps(Runner& runner, const Example& e,
                                               const std::vector<Tensor>& weights) = 0;
  /// Whether generation can keep keys and values, and a cache for `batch`
  /// sequences of up to `positions` tokens (null where it keeps none).
  virtual bool keeps_cache() const { return false; }
  virtual std::unique_ptr<nn::KVCache> make_cache(int64_t, int64_t) { return nullptr; }
};

/// A kind that writes a sequence task's answer token by token.
class SequenceDriver {
 public:
  virtual ~SequenceDriver() = default;
  /// Decoding task inputs of one length: the sequence each row's decoder
  /// starts from, and a step function from the tokens not fed yet
  /// ([B, new]) to their logits ([B, new, V]).
  virtual std::vector<int64_t> decoder_start(const std::vector<int64_t>& input) const = 0;
  virtual std::function<Tensor(const Tensor&)> decoder(const std::vector<std::vector<int64_t>>& inputs,
                                                       nn::KVCache* cache) = 0;
};

/// A kind that reads text: next-byte logits, with or without a cache.
class TextDriver {
 public:
  virtual ~TextDriver() = default;
  /// Next-byte logits [B, T, 256] of byte sequences [B, T].
  virtual Tensor text_logits(const Tensor& ids, std::vector<Tensor>* weights) = 0;
  /// The mean next-byte loss of ids [B, T] against targets [B, T] (a kind may fuse its head and loss).
  virtual Tensor text_loss(const Tensor& ids, const Tensor& targets, std::vector<Tensor>* weights) {
    return nn::cross_entropy(text_logits(ids, weights), targets);
  }
  /// Logits of new tokens `ids` at the cache's next positions (the cache then holds them).
  virtual Tensor cached_logits(const Tensor& ids, nn::KVCache& cache) = 0;
};

/// A kind that answers with one label.
class LabelDriver {
 public:
  virtual ~LabelDriver() = default;
  /// Each example's scores over the task's labels, [B, labels] (class
  /// logits, or the scores of the item after the whole history).
  virtual Tensor label_scores(const std::vector<Example>& batch) = 0;
};

/// Token ids or targets, made on the host, as an int64 tensor of `shape` on the model's device.
Tensor ids_for(const nn::Module& model, const std::vector<int64_t>& ids, const Shape& shape);

/// The drivers of the built-in kinds (drivers.cpp), for the kind table.
std::unique_ptr<ModelDriver> drive_gpt(std::unique_ptr<nn::Module> model);
std::unique_ptr<ModelDriver> drive_seq2seq(std::unique_ptr<nn::Module> model);
std::unique_ptr<ModelDriver> drive_encoder(std::unique_ptr<nn::Module> model);
std::unique_ptr<ModelDriver> drive_vit(std::unique_ptr<nn::Module> model);
std::unique_ptr<ModelDriver> drive_recommender(std::unique_ptr<nn::Module> model);

}  // namespace qkv::cli
