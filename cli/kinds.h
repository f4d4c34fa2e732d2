// The model kinds the program trains, samples and draws, in one table
// (kinds.cpp). Each row points at the library's kind (nn/model_kinds.h: its
// name, fields, bounds, parameter count and builder), so a kind is named
// once, and adds what the program must know of it: the task families it
// learns, how it reads them (drivers.h), and how its maps read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "drivers.h"
#include "nn/model_kinds.h"
#include "task.h"

namespace qkv::cli {

struct ModelSpec;

struct KindRow {
  const nn::ModelKind& (*model)();  // the library's kind
  const char* title;                // for pictures: "GPT"
  const char* layers_are;           // what --layers counts, after the number: "" or " per side"
  double blocks_per_layer;          // transformer blocks one layer holds, for memory estimates
  const char* maps_note;            // what `qkv attention` says of the kind's maps, after its general text
  /// The families it learns; a family's default kind is the first row that learns it.
  std::vector<TaskFamily> learns;
  bool causal;          // its self-attention is causal (a GPT, a recommender)
  bool scores_classes;  // a class head sized by the task's labels
  bool fixed_context;   // reads as many tokens as its shape says (a ViT: patches and [CLS]), whatever --context says
  bool fused_head;      // its loss is nn::linear_cross_entropy: the logits a block at a time, never all held
  const char* option;   // the one model flag only this kind takes ("patch", "pooling"), or null
  /// The positions one example of `task` feeds it: the context it needs.
  int64_t (*context_for)(const nn::ModelShape& shape, const Task& task);
  /// Fills the fields of its own a new model's spec leaves open (a ViT's image and patch).
  void (*fill)(ModelSpec& spec, const Task& task);
  /// The small model gradcheck and graph build fresh: what differs from width 8, 2 heads, 2 layers.
  void (*small)(ModelSpec& spec);
  /// The driver of a model the library built.
  std::unique_ptr<ModelDriver> (*drive)(std::unique_ptr<nn::Module> model);

  std::string name() const { return model().name; }
};

/// Every kind, in the order --help lists them.
const std::vector<KindRow>& kind_table();
/// The row of `kind`; throws "unknown model 'x' (gpt, seq2seq, ...)" for a kind the program has no row for.
const KindRow& kind_row(const std::string& kind);
/// The kinds the program drives, "gpt, seq2seq, ...", and whether `kind` is one.
std::string kind_names(const char* separator = ", ");
bool is_kind(const std::string& kind);
/// Whether `kind` learns `task` (its family).
bool learns(const KindRow& kind, const TaskRow& task);
/// The kind a task trains when --model is not given.
const KindRow& default_kind(const TaskRow& task);
/// The task a fresh small model of `kind` learns: the default task where the kind learns it, else its first.
const TaskRow& first_task(const KindRow& kind);

}  // namespace qkv::cli
