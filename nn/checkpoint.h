// A module's parameters in a safetensors file (io/safetensors.h writes and
// reads the files themselves).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/module.h"

namespace qkv::nn {

/// Writes a module's parameters under their dotted names, plus metadata.
void save_module(const std::string& path, const Module& module,
                 const std::map<std::string, std::string>& metadata = {});

/// Thrown by load_into for a tensor that holds a NaN or an infinity: the run
/// that wrote the file diverged. A type of its own, so that a program can
/// add its advice (how to train again) to the library's words.
class NonFiniteParameter : public Error {
 public:
  using Error::Error;
};

/// Copies the file's tensors into the module's parameters: every parameter
/// must be present with its shape and dtype and hold only finite numbers
/// (a NaN or infinity throws NonFiniteParameter, naming the tensor), and no
/// other tensor may be, except those whose names start with one of
/// `ignored_prefixes`.
void load_into(Module& module, const io::TensorFile& file, const std::string& path,
               const std::vector<std::string>& ignored_prefixes = {});

}  // namespace qkv::nn
