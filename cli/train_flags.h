// qkv train's flags and the run they resolve to (cli/train_flags.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "io/safetensors.h"
#include "runner.h"

namespace qkv::cli {

/// The names --optimizer and --schedule take: resolve() refuses any other.
inline const std::vector<std::string> kOptimizers{"adamw", "adam", "sgd"}, kSchedules{"constant", "cosine"};

/// A run resolved from its flags, else the resumed checkpoint's settings, else the defaults.
struct Run {
  bool resuming = false;
  std::string resume;         // the checkpoint resumed ("" for a new run)
  std::string init;           // a new run's GPT-2 folder, whose weights it starts from ("" for none)
  io::TensorFile resumed;     // its contents, read once
  int64_t resumed_step = -1;  // the step it saved
  ModelSpec spec;
  std::map<std::string, std::string> settings;  // recorded in the checkpoint (qkv.train)
  int64_t batch = 0, eval_every = 0, total = 0, save_every = 0;
  int64_t warmup = 0;          // the warm-up's length: --warmup, at most the budget the run started with
  int64_t budget_before = -1;  // on --resume, the budget the checkpoint's run had (-1: not recorded)
  double lr = 0, weight_decay = 0, clip = 0, target = 0, entropy_weight = 0;
  std::string optimizer, schedule;  // one of kOptimizers, one of kSchedules
  uint64_t seed = 1;
  bool checkpoint_activations = false;
};

/// qkv train's flags, grouped as --help shows them.
cxxopts::Options train_options();

/// The run the parsed flags give: on --resume the checkpoint (read once, into
/// Run::resumed) holds the model, the task and the training settings, and
/// only the run's own flags may change. Every value is range-checked.
Run resolve(const cxxopts::ParseResult& args);

}  // namespace qkv::cli
