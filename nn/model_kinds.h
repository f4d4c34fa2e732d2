// The kinds of model qkv builds from a description (a checkpoint's
// qkv.model and qkv.config, or a program's flags), each with its typed
// config's fields, bounds, parameter-count formula and builder. Adding a
// model kind means one entry here (model_kinds.cpp) and a row in the
// program's table of what it does with it (cli/kinds.cpp), which points at
// the entry; loading a file and the checks on a hostile one ask this registry.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nn/classifiers.h"
#include "nn/models.h"
#include "nn/recommender.h"

namespace qkv::nn {

/// Bounds on every model size, whether it comes from flags or from a file:
/// generous for a CPU framework, small enough that no file can make qkv
/// allocate without limit before its tensors are counted.
inline constexpr int64_t kMaxLayers = 128, kMaxWidth = 1 << 16, kMaxContext = 1 << 20, kMaxVocab = 1 << 20;
inline constexpr int64_t kMaxClasses = 1 << 16, kMaxImage = 1 << 12;

/// The sizes every attention model here has: the fields of qkv.config.
struct ModelShape {
  int64_t vocab = 0, context = 0, width = 64, heads = 4, layers = 2;  // layers: per side for an encoder-decoder
  double dropout = 0;
  bool post_ln = false;
  std::string attention = "full";  // full | window:W | linear (AttentionKind)
  int64_t classes = 0;             // classifiers (encoder, vit): the labels; 0 for the other kinds
  std::string pooling = "cls";     // encoder: cls | mean
  int64_t image = 0, patch = 0;    // vit: the square image's side and the patch's; 0 for the other kinds
  BlockParts parts;                // the blocks' named parts: fields only where they differ from the defaults

  /// As checkpoints store them: {"vocab": "14", "width": "64", ...}.
  std::map<std::string, std::string> fields() const;
  /// The inverse, every field parsed strictly and bounded; errors name `where`
  /// (the file) and the field. Files from before the attention field mean
  /// full, and files without a part's field (norm, mlp) its default part; the
  /// classifier and image fields are written only by kinds that use them.
  static ModelShape from_fields(const std::map<std::string, std::string>& fields, const std::string& where);
};

struct ModelKind {
  std::string name;     // "gpt"
  std::string summary;  // for --help and errors
  /// The parameter count of the model `shape` describes, from the formula
  /// beside the model (tests hold it equal to the built model's count).
  std::function<int64_t(const ModelShape& shape)> parameter_count;
  /// Throws unless `shape` has the fields this kind needs (errors name
  /// `where`); run before the formula or the builder sees them.
  std::function<void(const ModelShape& shape, const std::string& where)> check;
  /// Builds it (initial weights from `gen`, or the default generator).
  std::function<std::unique_ptr<Module>(const ModelShape& shape, Generator* gen)> build;
};

/// The kind named `name`; throws "unknown model 'x' (gpt, seq2seq, ...)" otherwise.
const ModelKind& model_kind(const std::string& name);
/// Every kind's name, in registration order.
std::vector<std::string> model_kind_names();
/// Adds a kind (a program's own model registers itself this way).
void register_model_kind(ModelKind kind);

/// The built-in kinds' entries (a program's table of kinds points at these).
const ModelKind& gpt_kind();
const ModelKind& seq2seq_kind();
const ModelKind& encoder_kind();
const ModelKind& vit_kind();
const ModelKind& recommender_kind();

/// The typed configs of the built-in kinds.
GPTConfig gpt_config(const ModelShape& shape);
Seq2SeqConfig seq2seq_config(const ModelShape& shape);
EncoderConfig encoder_config(const ModelShape& shape);
ViTConfig vit_config(const ModelShape& shape);
RecommenderConfig recommender_config(const ModelShape& shape);

}  // namespace qkv::nn
