// A training run in one safetensors file: the model's parameters under their
// dotted names, the optimizer's state under "optimizer.<param>.<buffer>", and
// in the metadata the step, the optimizer kind and settings, the generators'
// states and whatever the caller adds (the model's configuration). The file
// alone is enough to resume bit-identically.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/generator.h"
#include "nn/checkpoint.h"
#include "optim/optimizer.h"

namespace qkv::optim {

using NamedGenerators = std::vector<std::pair<std::string, Generator*>>;

/// Saves model, optimizer (may be null: a model-only file) and generators.
/// `existing` as for io::commit_file: Keep never replaces a file that appeared meanwhile.
void save_training_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                              const NamedGenerators& generators, std::map<std::string, std::string> metadata = {},
                              io::Existing existing = io::Existing::Replace);

/// Restores what save_training_checkpoint() wrote into an existing model,
/// optimizer (of the same kind; may be null to load the model only) and
/// generators, after validating all of it. Returns the file's metadata.
std::map<std::string, std::string> load_training_checkpoint(const std::string& path, nn::Module& model,
                                                            Optimizer* optimizer, const NamedGenerators& generators);
/// The same from a file already read (`path` names it in errors).
std::map<std::string, std::string> load_training_checkpoint(io::TensorFile file, const std::string& path,
                                                            nn::Module& model, Optimizer* optimizer,
                                                            const NamedGenerators& generators);

}  // namespace qkv::optim
