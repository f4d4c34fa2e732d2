// Everything needed to rebuild a model, as a checkpoint's metadata carries
// it: the model's kind and shape (nn/model_kinds.h owns their fields, bounds
// and parameter count) and the task it learns; and the memory it takes.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors.h"
#include "nn/model_kinds.h"

namespace qkv::cli {

struct ModelSpec : nn::ModelShape {
  std::string model;                // a kind of the kind table (kinds.h)
  std::string task;                 // a task of the task table (task.h)
  int64_t max_len = 8, digits = 3;  // sequence tasks, brackets and sessions (max_len)
  std::string data;                 // text and digits: the --data file, "" for the bundled one
  std::string source;               // the checkpoint it was read from ("" from flags): errors name it
  std::string tokenizer;            // text: where its BPE tokenizer came from (a folder; shown), "" for bytes
  std::map<std::string, std::string> tokenizer_files;  // and that tokenizer's files, name to contents (bpe.h)
  int64_t example_tokens = 0;  // positions one example feeds (the Runner sets it: the task's, or the context)
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

/// training_step_bytes for this model and `batch` examples of example_tokens
/// positions (a text window: the context), each layer's attention weights
/// counted (2 a head per token): a high estimate of a forward pass too.
double training_bytes(const ModelSpec& s, int64_t batch);

/// Bytes a no-grad forward of `batch` windows of the context needs beyond
/// the loaded model, roughly: the logits and their softmax, a layer's
/// activations (the fused attention keeps no n x n scores).
double forward_bytes(const ModelSpec& s, int64_t batch);

/// The error of a checkpoint whose description qkv cannot use: `what`, naming the file (`file`, printable) once.
Error bad_description(const std::string& file, const std::string& what);

}  // namespace qkv::cli
