// Where a training run's work goes, checked before its first step: the
// checkpoint (--save), the log beside it (--log, or NAME.csv), and the model
// of its best evaluation (NAME.best.safetensors). A run must not train for
// an hour and then find it cannot save, or replace another run's file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "io/output.h"
#include "train/trainer.h"
#include "train_flags.h"

namespace qkv::cli {

struct RunOutputs {
  std::string save;          // the checkpoint: the last step's model
  std::string log;           // the per-step log ("" for none)
  bool replace_log = false;  // a new log replaces the file at its name (--force, or a failed run's leftover log)
  /// What the checks decided about the log, said once the run starts (a run that fails first says only why).
  std::vector<std::string> notes;
  std::string best;         // the best evaluation's model ("" where none is kept)
  bool continuing = false;  // --resume into its own checkpoint: the files there are this run's
};

/// The run's outputs, each checked: writable, and not another run's file
/// unless --force. On --resume the log keeps only the rows that led to the
/// checkpoint (and says what it dropped).
RunOutputs check_outputs(const cxxopts::ParseResult& args, const Run& run);

/// A file a run saves again and again (its checkpoint, its best model). A
/// save replaces what is at the path only if the run may: with --force, or
/// when it is the very file the run found there as its own (the checkpoint it
/// resumes) or saved there last. A file that appeared or was replaced
/// meanwhile (another run's on the same name, a user's) stays, and the save
/// is kept beside it (io::Existing::Keep: the error says where).
class SaveTarget {
 public:
  SaveTarget(std::string path, bool force, bool ours_now);
  const std::string& path() const { return path_; }
  /// What the next save does with a file at the path.
  io::Existing next() const;
  /// After a save: what is at the path is the run's own.
  void saved();

 private:
  std::string path_;
  bool force_;
  bool known_ = false;  // the run knows the file at the path as its own: by its device and inode
  uint64_t device_ = 0, inode_ = 0;
};

/// Keeps the model of the run's best evaluation in its own checkpoint,
/// replaced whenever an evaluation beats it. A resumed run continues the
/// best its file records.
class BestModel {
 public:
  /// `path` "" keeps none; `resuming`: a file at `path` is this run's best so far.
  BestModel(std::string path, bool resuming);
  /// After the evaluation of `step`: `save` writes the model with the metadata
  /// it is given when `e` beats the best so far.
  void offer(const train::Evaluation& e, int64_t step,
             const std::function<void(const std::map<std::string, std::string>&)>& save);
  bool kept() const { return !std::isnan(metric_); }
  const std::string& path() const { return path_; }
  double metric() const { return metric_; }
  int64_t step() const { return step_; }

 private:
  std::string path_;
  double metric_ = NAN;
  int64_t step_ = -1;
};

}  // namespace qkv::cli
