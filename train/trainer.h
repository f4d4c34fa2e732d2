// The training loop, owned by the library: a C++ program trains a model in
// about twenty lines (examples/train_library.cpp), and `qkv train`, `qkv
// bench` and the MPI test are three uses of this one loop.
//
// One step: the learning rate from the schedule, the caller's loss on this
// rank's slice of the batch, backward (each rank's loss weighted by its
// share of the global batch, then gradients averaged over the ranks),
// clipping, a check that loss and norm are finite, the update. Around it:
// evaluations (with a target that stops the run), a stop the ranks agree on
// (request_stop() is safe in a signal handler), periodic saving through the
// caller's callback, a check that every rank holds the same parameters, and
// the per-step log (CSV or JSON lines, with each layer's gradient norm and
// update ratio).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace qkv::train {

/// This rank's part of one step.
struct StepLoss {
  Tensor loss;         // the mean loss over this rank's examples
  double share = 1;    // this rank's share of the global batch's loss terms (1 in one process)
  int64_t tokens = 0;  // tokens the whole step processed, for tokens/s
};

/// What an evaluation found.
struct Evaluation {
  double metric = 0;             // e.g. held-out accuracy or loss
  bool higher_is_better = true;  // accuracy: yes; loss: no
  bool reached = false;          // the run's target: training stops
  std::string text;              // for the progress line: "held-out exact match 97.20%"
  double held_out_loss = NAN;    // beside an accuracy: the training loss on the held-out examples (NaN: none)
};

/// After each step, for progress lines.
struct Progress {
  int64_t step = 0, total = 0;  // updates taken, budget
  double loss = 0;              // this step's loss, averaged over the ranks
  double smoothed = 0;          // exponential moving average over about 20 steps
  double lr = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0, eta_s = 0;
  const Evaluation* evaluation = nullptr;  // set at evaluation steps (on the rank that evaluates)
};

struct TrainerOptions {
  int64_t steps = 1000;      // the budget, counting steps a resumed optimizer already took
  int64_t eval_every = 100;  // evaluate every N steps and after the last
  int64_t save_every = 0;    // also save every N steps (0: only when the run ends)
  double clip = 1;           // gradient norm limit; 0 clips nothing (the norm is still measured)
  std::string log;           // per-step log file ("" none): CSV if is_csv_log(log), else JSON lines
  bool append_log = false;   // continue an existing log (a resumed run) instead of starting one
  bool replace_log = false;  // a new log replaces a file of its name; else any file there (another run's) is an error
  bool extra_log_column = false;  // one more logged value per step (extra_log_value)
  std::string extra_log_name = "attn_entropy";
  /// Under mpirun: average the gradients over the ranks (false: this process
  /// trains alone, as a single-process reference beside parallel ones does).
  bool data_parallel = true;
  /// Ends the message when the loss or the gradient norm stops being finite
  /// (a program may name its own flags instead).
  std::string divergence_advice = ". Try a lower learning rate or a limit on the gradient norm";
  /// The log in error messages (a program may name its flag: "--log file").
  std::string log_label = "the log file";
  /// Ends the message when a row of the log cannot be written (a full disk:
  /// the run saves, then stops); a program's way to go on once there is room.
  std::string log_failure_advice;
};

/// How a run ended.
struct Outcome {
  enum Reason { Budget, Target, Stopped } reason = Budget;
  int64_t steps = 0;  // updates taken in all
  double best_metric = NAN, last_metric = NAN;
  int64_t best_step = 0;
  double elapsed_s = 0;
};

class Trainer {
 public:
  /// Trains the optimizer's parameters (optimizer.params(): their names
  /// group the log's per-layer columns and name a non-finite one).
  Trainer(optim::Optimizer& optimizer, const optim::Schedule& schedule, TrainerOptions options);
  ~Trainer();

  /// Required: the loss of step `step` (0-based) on this rank's slice.
  std::function<StepLoss(int64_t step)> loss;
  /// Optional: runs on rank 0 at evaluation steps.
  std::function<Evaluation(int64_t step)> evaluate;
  /// Optional: writes a checkpoint (called on rank 0 only).
  std::function<void()> save;
  /// Optional: after every step, on rank 0 (progress lines).
  std::function<void(const Progress&)> on_step;
  /// Optional: the extra logged value of the step just taken (TrainerOptions::extra_log_column).
  std::function<double()> extra_log_value;

  /// Trains until the budget, the target or a stop request; saves at
  /// save_every steps and at the end (also when stopped). A non-finite loss
  /// or gradient norm throws qkv::Error before the update, without saving,
  /// naming the last saved step, and so do weights an update made non-finite
  /// when the run would save them, and an `evaluate` that throws (its message
  /// kept); a log that cannot be written saves first, then throws.
  Outcome run();

  /// The run's settings as a checkpoint records them: `others` (the model's,
  /// the optimizer's, the data's: the caller's) with the Trainer's own
  /// (steps, eval-every, save-every, clip) in the same text a flag gives.
  std::map<std::string, std::string> settings(std::map<std::string, std::string> others = {}) const;

  /// The steps saved so far end at this one (-1: nothing saved by this run or before it).
  int64_t saved_step() const { return saved_step_; }
  /// Before run(): the steps saved before this run end at `step`, in `file`
  /// (a resumed run's own checkpoint, which --save may not be).
  void set_saved_step(int64_t step, std::string file) {
    saved_step_ = step;
    saved_file_ = std::move(file);
  }
  /// Names the checkpoint in error messages ("reverse.safetensors").
  std::string save_name = "the checkpoint";
  /// What the log holds so far, as log_digest() of its bytes ("" without a
  /// log): a checkpoint records it, so a resumed run can tell its own log
  /// from another file before writing to it. Complete rows only: a row cut
  /// off by a full disk is not counted.
  std::string log_digest() const;

  /// Asks every running trainer to stop after its current step and save.
  /// Async-signal-safe: a SIGINT handler may call it.
  static void request_stop();
  static bool stop_requested();

 private:
  struct Log;
  // The parts of one step of run(), in their order.
  /// The learning rate set, this rank's loss, backward, the gradients averaged over the ranks.
  StepLoss take_gradients(int64_t step, int ranks);
  /// The global batch's loss, which every rank agrees on, and whether any rank was asked to stop.
  double agree_on_loss(const StepLoss& part, int ranks, bool& stop) const;
  /// Throws, before the update, when the loss or the gradient norm is not finite.
  void check_finite(double value, double norm, int64_t step) const;
  /// At an evaluation step: the ranks' parameters compared, `evaluate` run
  /// (on the lead) into `evaluation` and `out`; whether the target was reached.
  bool evaluate_step(Progress& p, Evaluation& evaluation, Outcome& out, int ranks);
  /// The step's log row; a row that cannot be written saves, then throws.
  void write_log_row(const Progress& p, double value, double norm);
  void save_now();
  /// "training stopped without saving; <file> still holds step N", for the errors that stop a run.
  std::string unsaved() const;
  /// This process evaluates, logs, saves and reports: rank 0, or any process training alone.
  bool leads() const;
  std::vector<Tensor> tensors_;
  optim::Optimizer& optimizer_;
  const optim::Schedule& schedule_;
  TrainerOptions o_;
  std::unique_ptr<Log> log_;
  int64_t saved_step_ = -1;
  std::string saved_file_;  // where saved_step_ is, when not save_name
};

/// Whether a log at `path` is CSV (its name ends in .csv or .CSV) rather than JSON lines.
bool is_csv_log(const std::string& path);

/// The length and FNV-1a hash of a log's text, "<bytes>:<16 hex digits>".
std::string log_digest(std::string_view text);

/// A progress line in qkv's format: "step 40/4000  avg loss 2.4562  lr 6.67e-04  31774 tok/s  1m02s elapsed  ETA
/// 3h01m".
std::string progress_line(const Progress& p, bool eta_is_bound);
/// "1m02s", "3h01m", "> 99 days".
std::string duration(double seconds);

}  // namespace qkv::train
