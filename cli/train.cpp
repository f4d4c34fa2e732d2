// qkv train: flags -> a model, a task and training settings -> the library's
// Trainer (train/trainer.h), which runs the loop, evaluates, logs and saves.
// Here: where the work goes, the steps' loss and evaluation, progress lines;
// the flags and the resume merge are train_flags.cpp's.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <cxxopts.hpp>

#include "autograd/cpu.h"
#include "bounds.h"
#include "commands.h"
#include "distributed/dist.h"
#include "io/metadata.h"
#include "io/output.h"
#include "optim/optim.h"
#include "runner.h"
#include "train/trainer.h"
#include "train_flags.h"

namespace qkv::cli {

namespace {

// SIGINT, SIGTERM and SIGHUP (Ctrl-C, kill, timeout, a closed terminal, a
// batch scheduler) stop at the end of the step and save. A second signal a
// second or more later exits at once without saving; signals closer together
// count as one (mpirun passes a Ctrl-C on as SIGTERM, on top of the
// terminal's own SIGINT).
volatile std::sig_atomic_t interrupted = 0;
volatile std::sig_atomic_t first_signal_s = 0;
void on_interrupt(int) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  if (interrupted && now.tv_sec - first_signal_s >= 1) {
    static const char kMessage[] = "\nqkv train: second signal: exiting without saving\n";
    ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    (void)ignored;
    _exit(130);
  }
  if (!interrupted) first_signal_s = static_cast<std::sig_atomic_t>(now.tv_sec);
  interrupted = 1;
  train::Trainer::request_stop();  // async-signal-safe: the ranks agree on it at the step's end
}

// The positions the loss of examples [first, first + count) averages over
// (answer and EOS tokens, one label, or a history's next items).
int64_t loss_tokens(const Runner& runner, const std::vector<Example>& examples, int64_t first, int64_t count) {
  int64_t n = 0;
  for (int64_t i = first; i < first + count; ++i) n += runner.loss_positions(examples[i]);
  return n;
}

// The first free name among base.safetensors, base-2.safetensors, ...
std::string fresh_name(const std::string& base) {
  for (int i = 1; i < 10000; ++i) {
    std::string name = i == 1 ? base + ".safetensors" : cat(base, "-", i, ".safetensors");
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(name, ec))) return name;
  }
  throw Error(cat("no free name ", base, "-N.safetensors: give one with --save FILE"));
}

// A float64 copy of the model checked on a small batch, dropout replayed.
bool check_gradients(Runner& runner, Generator& data, const char* when) {
  Runner copy(runner.spec());
  copy.module().to(DType::Float64);
  auto target = copy.module().named_parameters();
  auto source = runner.module().named_parameters();
  for (size_t i = 0; i < target.size(); ++i)
    target[i].second.assign_(source[i].second.to(Device::cpu()).to(DType::Float64));  // checked on the CPU
  copy.module().train();
  GradcheckOptions options;
  options.max_entries = 8;
  // The kind of batch the model trains on; `data` is copied, so its stream does not advance.
  GradcheckResult r = gradcheck_leaves(copy.fixed_batch_loss(2, data), target, options);
  int bad = 0;
  for (const auto& in : r.inputs) bad += !in.ok;
  std::printf("gradient check %s: %zu parameters (8 entries each), float64, worst rel error %.2e, %s\n", when,
              r.inputs.size(), r.worst_rel_error(), r.ok ? "all ok" : (std::to_string(bad) + " FAILED").c_str());
  return r.ok;
}

// Every rank must run the same training: each flag's value is compared
// across ranks (a hash per flag, over the fixed list of train's flags, so
// that every rank makes the same collectives whatever it was given). Only
// --threads may differ.
void check_ranks_agree(const cxxopts::Options& options, const cxxopts::ParseResult& args) {
  if (dist::world_size() <= 1) return;
  std::map<std::string, std::string> given;
  for (const auto& kv : args.arguments()) given[kv.key()] += "=" + kv.value();
  for (const std::string& group : options.groups())
    for (const auto& option : options.group_help(group).options) {
      const std::string& name = option.l.front();
      if (name == "threads" || name == "help") continue;
      std::string value = given.count(name) ? given.at(name) : "(not given)";
      QKV_CHECK(dist::same_on_all_ranks(std::hash<std::string>{}(value)), "the ranks were started with different --",
                name, ": every rank must run the same training (only --threads may differ)");
    }
}

// Refuses a run whose training (this rank's share of the batch) would not
// fit in memory. A resumed run's model and batch are its checkpoint's, which
// no flag changes: the error names the file instead of flags to lower.
void check_training_fits(const ModelSpec& spec, const dist::Slice& mine, const Run& run) {
  const std::string parts = cat(run.batch, mine.count < run.batch ? " (this rank's share)" : "",
                                " (parameters, gradients, optimizer state, activations)");
  check_fits_in_memory(
      training_bytes(spec, mine.count),
      run.resuming ? cat(printable(run.resume), ": training the model it holds on its batch of ", parts)
                   : cat("training this model on --batch ", parts),
      run.resuming ? "resume it on a machine with more memory" : "use a smaller --batch, --dim, --layers or --context");
}

// The first field of a log row: its step (CSV "12,..." or JSON '{"step":12,...'); -1 if none.
int64_t logged_step(const std::string& line) {
  size_t at = line.rfind("{\"step\":", 0) == 0 ? 8 : 0;
  int64_t step = 0;
  size_t end = line.find_first_of(",}", at);
  if (end == std::string::npos || !io::parse_integer(std::string_view(line).substr(at, end - at), step)) return -1;
  return step;
}

// On --resume, the log keeps only what led to the checkpoint: rows past its
// step (written before a crash or kill -9) and a cut-off last line (a full
// disk) go, so the resumed run's rows follow on without repeating steps.
// Returns the lines kept, and in `dropped` what goes. A file with any
// other line is not a qkv log: it is refused, never trimmed.
struct Dropped {
  int64_t past = 0;  // whole rows past the checkpoint's step
  bool cut = false;  // and a last row cut off mid-write
  bool any() const { return past > 0 || cut; }
  // "2 lines past the checkpoint's step 40 and a row cut off mid-write", each with its cause if `why`
  std::string said(int64_t step, bool why) const {
    std::string rows = past == 0 ? "" : cat(past, " line", past == 1 ? "" : "s", " past the checkpoint's step ", step);
    if (past > 0 && why) rows += " (written after it was saved)";
    std::string end = !cut  ? ""
                      : why ? "a row cut off mid-write (a full disk, or a kill while it wrote)"
                            : "a row cut off";
    return rows + (past > 0 && cut ? " and " : "") + end;
  }
};
std::string trimmed_log(const std::string& path, const std::string& who, int64_t step, Dropped& dropped) {
  std::string text = io::read_regular_file(path, int64_t{1} << 30, "log file");
  std::string kept;
  int64_t number = 0;
  dropped = {};
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    ++number;
    bool header = number == 1 && line.rfind("step,", 0) == 0;
    int64_t s = header ? 0 : logged_step(line);
    bool row_start =
        !line.empty() && (std::isdigit(static_cast<unsigned char>(line[0])) || line.rfind("{\"step\":", 0) == 0);
    if (end == std::string::npos) {  // no newline: a row cut off mid-write
      QKV_CHECK(row_start || header, who, ": line ", number,
                " is not a qkv log row; choose another --log (qkv rewrites a resumed run's log)");
      dropped.cut = true;
      break;
    }
    at = end + 1;
    QKV_CHECK(header || s >= 0, who, ": line ", number,
              " is not a qkv log row; choose another --log (qkv rewrites a resumed run's log)");
    if (header || s <= step)
      kept += line + "\n";
    else
      ++dropped.past;
  }
  return kept;
}

// Whether two paths name one file (or, for a file not there yet, one path).
bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) return std::filesystem::equivalent(a, b, ec);
  return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
}

// Returns whether `path` exists; a folder, link or device there is refused
// whatever the flags (--force would not help), `who` naming it ("--save F").
bool check_file_or_absent(const std::string& path, const std::string& who, const char* what) {
  std::error_code ec;
  auto status = std::filesystem::symlink_status(path, ec);
  QKV_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status), who, " is ",
            std::filesystem::is_directory(status) ? "a folder"
            : std::filesystem::is_symlink(status) ? "a symbolic link"
                                                  : "not a regular file",
            ": give ", what, " file name");
  return std::filesystem::exists(status);
}

// Where the work goes, checked before the first step: a run must not train
// for an hour and then find it cannot save, or replace another run's file.
// Returns the checkpoint's path.
std::string check_save(const cxxopts::ParseResult& args, const Run& run) {
  const bool force = args.count("force") > 0;
  std::string save = args.count("save") ? args["save"].as<std::string>()
                     : run.resuming     ? run.resume
                                        : fresh_name(run.spec.task);
  QKV_CHECK(!save.empty(), "--save needs a file name");
  if (dist::rank() != 0) return save;  // rank 0 alone saves and logs
  bool exists = check_file_or_absent(save, cat("--save ", printable(save)), "a checkpoint");
  bool continuing = run.resuming && same_file(save, run.resume);
  QKV_CHECK(!exists || continuing || force, printable(save),
            " already exists: choose another --save, continue its run "
            "with --resume ",
            printable(save), ", or replace it with --force");
  QKV_CHECK(!args.count("data") || !same_file(save, args["data"].as<std::string>()), "--save ", printable(save),
            " is this run's --data file: choose another --save");
  io::make_parent_folders(save, "--save");
  io::check_writable_target(save);
  return save;
}

// The same for the log, `who` naming it in errors ("--log F", or F for the log a checkpoint named). On
// --resume an existing log keeps only what led to the checkpoint (trimmed_log), and only if it is the
// run's own: the checkpoint records what its run's log held when it was saved, and any other file
// (another run's log, or this one changed since) would lose its rows past the step, or take this run's
// under its header. `named` (a log the checkpoint named, not the user): the digest is the file's own
// say-so, which a hostile checkpoint can forge (that of the empty text left by cutting every row of a
// user's CSV), so such a log is never rewritten: it must already be a qkv log's text, and end at the step.
void check_log(const cxxopts::ParseResult& args, const Run& run, const std::string& save, const std::string& log_path,
               const std::string& who, bool force, bool named = false) {
  // The log is written to (and on --resume rewritten): never one of the run's other files.
  const std::string data = args.count("data") ? args["data"].as<std::string>() : "";
  for (const auto& [other, flag] :
       {std::pair{save, "--save"}, std::pair{run.resume, "--resume"}, std::pair{data, "--data"}})
    QKV_CHECK(!same_file(log_path, other), who, " is this run's ", flag, " file: choose another --log");
  const bool exists = check_file_or_absent(log_path, who, "a log");
  // Resuming continues its log; a fresh run never mixes itself into an old one.
  QKV_CHECK(!exists || run.resuming || force, who, " already exists: choose another file, or replace it with --force");
  io::make_parent_folders(log_path, "--log");
  // A new log is created in its folder (with --force, a temporary renamed into place; io::GrowingFile).
  io::check_writable_target(log_path, /*probe=*/!(run.resuming && exists));
  if (!run.resuming || !exists) return;
  QKV_CHECK(::access(log_path.c_str(), W_OK) == 0, who, " cannot be written: ", std::strerror(errno));
  Dropped dropped;
  const std::string kept = trimmed_log(log_path, who, run.resumed_step, dropped);
  if (named) {
    const bool shaped = kept.rfind(train::is_csv_log(log_path) ? "step,loss,lr,grad_norm," : "{\"step\":", 0) == 0;
    QKV_CHECK(shaped, who, " does not begin as a qkv log does");
    QKV_CHECK(!dropped.any(), who, " holds ", dropped.said(run.resumed_step, false), " (give --log ",
              printable(log_path), " to cut ", dropped.past + dropped.cut == 1 ? "it" : "them", " and continue it)");
  }
  auto digest = run.resumed.metadata.find("qkv.log.digest");
  QKV_CHECK(force || digest != run.resumed.metadata.end(), who, ": ", printable(run.resume),
            " records no digest of its log (saved by qkv before 2026-11-25): give --log a new file, or continue "
            "this one anyway with --force");
  QKV_CHECK(force || digest->second == train::log_digest(kept), who, " is not the log of the run that saved ",
            printable(run.resume), " (or it changed since): give --log a new file, or continue it anyway with --force");
  if (dropped.any()) {
    io::write_file(log_path, kept);
    std::printf("%s: dropped %s\n", printable(log_path).c_str(), dropped.said(run.resumed_step, true).c_str());
  }
}

// The log a run writes: --log; or, resuming into its own checkpoint without --log, the log that checkpoint's
// run wrote (log_beside: validated before it is followed), if it is that run's own (check_log). Otherwise none,
// with a note: a branch saved elsewhere, or a log that is not there, writable, or the run's own, is left alone.
std::string log_file(const cxxopts::ParseResult& args, const Run& run, const std::string& save) {
  if (args.count("log")) {
    const std::string path = args["log"].as<std::string>();
    QKV_CHECK(!path.empty(), "--log needs a file name");
    if (dist::rank() == 0) check_log(args, run, save, path, cat("--log ", printable(path)), args.count("force") > 0);
    return path;
  }
  if (!run.resuming || dist::rank() != 0) return "";
  std::string why, path = log_beside(run.resume, run.resumed.metadata, why);
  if (path.empty()) {
    if (run.resumed.metadata.count("qkv.log"))
      std::printf("note: %s: it is not continued (give --log FILE)\n", why.c_str());
    return "";
  }
  try {
    QKV_CHECK(same_file(save, run.resume), "this run saves into ", printable(save), ", not ", printable(run.resume),
              " (a branch)");
    check_log(args, run, save, path, printable(path), /*force=*/false, /*named=*/true);
    return path;
  } catch (const Error& e) {  // the reason may already say which --log to give
    const bool advised = std::string(e.what()).find("--log") != std::string::npos;
    std::printf("note: the run's log is not continued: %s%s\n", e.what(), advised ? "" : " (give --log FILE)");
    return "";
  }
}

// run.optimizer and run.schedule are names resolve() accepted (kOptimizers, kSchedules).
std::unique_ptr<optim::Optimizer> make_optimizer(const Run& run, const optim::NamedTensors& params) {
  if (run.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{run.lr, 0.9, 0, run.weight_decay, true});
  optim::AdamOptions o;
  o.lr = run.lr, o.weight_decay = run.weight_decay;
  if (run.optimizer == "adam") return std::make_unique<optim::Adam>(params, o);
  return std::make_unique<optim::AdamW>(params, o);
}

std::unique_ptr<optim::Schedule> make_schedule(const Run& run) {
  if (run.schedule == "constant") return std::make_unique<optim::ConstantLR>(run.lr);
  return std::make_unique<optim::CosineLR>(run.lr, run.warmup, std::max(run.total, run.warmup), run.lr * 0.1);
}

// This rank's part of a step: the task's batch (the whole global batch is
// drawn on every rank, so the data stream stays shared, and each takes its
// slice, its loss weighted by its share of the answer tokens), or text windows.
train::StepLoss step_loss(Runner& runner, const Run& run, Generator& data, const dist::Slice& mine) {
  train::StepLoss part;
  const int ranks = dist::world_size();
  if (runner.task() || runner.label_task()) {
    std::vector<Example> examples;
    for (int64_t b = 0; b < run.batch; ++b) {
      examples.push_back(runner.draw(data));
      part.tokens += static_cast<int64_t>(examples.back().input.size() + examples.back().answer.size() + 2);
    }
    if (ranks > 1) {
      part.share = static_cast<double>(loss_tokens(runner, examples, mine.first, mine.count)) /
                   loss_tokens(runner, examples, 0, run.batch);
      examples = std::vector<Example>(examples.begin() + mine.first, examples.begin() + mine.first + mine.count);
    }
    part.loss = runner.loss(examples);
  } else {
    part.loss = runner.text_loss("train", run.batch, data, mine.first, mine.count);
    part.share = static_cast<double>(mine.count) / static_cast<double>(run.batch);
    part.tokens = run.batch * runner.spec().context;
  }
  return part;
}

// The held-out metric: a label task's accuracy or HR@10 (on up to 1,000
// held-out examples), exact match on 500 examples (tasks), or the loss over
// 64 windows (text); the same examples at every evaluation.
train::Evaluation evaluate(Runner& runner, const Run& run) {
  train::Evaluation e;
  Generator held_out(run.seed ^ 0x4e1d0e7ULL);
  if (runner.label_task()) {
    LabelMetrics m = runner.evaluate_labels(1000, held_out);
    e.metric = m.metric();
    char text[128];
    if (m.ranks)
      std::snprintf(text, sizeof text, "held-out HR@10 %.4f, NDCG@10 %.4f (most popular: HR@10 %.4f)", m.hit_rate,
                    m.ndcg, m.popular_hit_rate);
    else
      std::snprintf(text, sizeof text, "held-out accuracy %.2f%% on %lld", 100 * m.accuracy,
                    static_cast<long long>(m.examples));
    e.text = text;
    e.reached = run.target > 0 && e.metric >= run.target;  // 0: no target
  } else if (runner.task()) {
    e.metric = runner.accuracy(500, held_out);
    char text[64];  // two decimals, as eval and the classifiers print (500 examples: steps of 0.2%)
    std::snprintf(text, sizeof text, "held-out exact match %.2f%%", 100 * e.metric);
    e.text = text;
    e.reached = run.target > 0 && e.metric >= run.target;  // 0: no target
  } else {
    e.metric = runner.held_out_loss(64, held_out);
    e.higher_is_better = false;
    char text[64];
    std::snprintf(text, sizeof text, "held-out loss %.3f (%.3f bits/byte)", e.metric, e.metric / std::log(2.0));
    e.text = text;
  }
  return e;
}

void print_banner(const Runner& runner, const Run& run, const optim::Optimizer& opt, int64_t params) {
  const ModelSpec& s = runner.spec();
  const int ranks = dist::world_size();
  std::printf(
      "qkv train: %s on %s, %lld parameters (width %lld, %lld layers, %lld heads, context %lld), %s, %d thread%s%s\n",
      s.model.c_str(),
      s.task == "text" ? ("text " + (s.data.empty() ? std::string("(bundled)") : printable(s.data))).c_str()
                       : s.task.c_str(),
      static_cast<long long>(params), static_cast<long long>(s.width), static_cast<long long>(s.layers),
      static_cast<long long>(s.heads), static_cast<long long>(s.context), opt.name().c_str(), get_num_threads(),
      get_num_threads() == 1 ? "" : "s",
      ranks > 1 ? cat(" per rank, ", ranks, " ranks (MPI) of ", run.batch / ranks,
                      run.batch % ranks ? "-" + std::to_string(run.batch / ranks + 1) : "", " examples each")
                      .c_str()
                : "");
  std::printf("  %s\n", cpu::describe_kernels().c_str());
  if (Device d = runner.device(); !d.is_cpu())
    std::printf("  the model trains on %s: %s\n", d.str().c_str(), device_backend(d).describe(d.index).c_str());
  std::fflush(stdout);  // the banner shows at once in a pipe or a file, before the first step's seconds
}

}  // namespace

namespace {

// What the checkpoint records: the model and task, the run's settings (the
// Trainer's and the rest), and the log's name when it lies beside the
// checkpoint (where qkv explore finds the run's curves).
std::map<std::string, std::string> checkpoint_metadata(const Runner& runner,
                                                       const std::map<std::string, std::string>& settings,
                                                       const std::string& log_path, const std::string& save) {
  std::map<std::string, std::string> metadata = runner.spec().metadata();
  metadata["qkv.train"] = io::json_object(settings);
  namespace fs = std::filesystem;
  if (!log_path.empty() && fs::absolute(log_path).parent_path() == fs::absolute(save).parent_path())
    metadata["qkv.log"] = fs::path(log_path).filename().string();
  return metadata;
}

// The loop's settings: the run's budget, evaluations, saves, clip and log.
train::TrainerOptions trainer_options(const Run& run, const std::string& log_path, const std::string& save,
                                      bool force) {
  train::TrainerOptions to;
  to.steps = run.total, to.eval_every = run.eval_every, to.save_every = run.save_every, to.clip = run.clip;
  to.log = log_path, to.append_log = run.resuming, to.replace_log = force;
  to.extra_log_column = run.entropy_weight != 0;
  // A --clip limit is advice only where there is none; --resume keeps the checkpoint's settings.
  to.divergence_advice =
      cat(run.resuming ? ". Start a new run with a lower --lr" : ". Try a lower --lr",
          run.clip > 0 ? "" : " or a --clip limit", run.entropy_weight != 0 ? ", or a smaller --attn-entropy" : "");
  to.log_label = "--log file";  // after a full disk the run saved: it goes on from there
  to.log_failure_advice = cat(" (continue with --resume ", printable(save), " once there is room)");
  return to;
}

}  // namespace

int train(int argc, char** argv) {
  cxxopts::Options options = train_options();
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  QKV_CHECK(args.unmatched().empty(), "unexpected argument '", printable(args.unmatched()[0]),
            "' (flags start with --)");
  check_ranks_agree(options, args);  // before any collective that depends on a flag
  Run run = resolve(args);
  // Data parallel under mpirun: rank r trains on slice r of every global batch.
  const int ranks = dist::world_size(), me = dist::rank();
  const bool lead = me == 0;  // prints, logs, evaluates and saves
  QKV_CHECK(run.batch >= ranks, "--batch ", run.batch,
            " is the global batch: it needs at least one example for each of the ", ranks, " ranks");
  const dist::Slice mine = dist::slice_of(run.batch, me, ranks);
  set_threads_option(args.count("threads") ? args["threads"].as<int>() : 0);
  const Device device = set_device_option(args.count("device") ? args["device"].as<std::string>() : "cpu");
  const std::string save = check_save(args, run);
  const std::string log_path = log_file(args, run, save);

  manual_seed(run.seed);
  // Checked before the model is built: after, a refused --dim 4096 had spent 8 s initialising 800 MB of weights.
  Runner runner(run.spec, nullptr, true, [&](const ModelSpec& spec) { check_training_fits(spec, mine, run); });
  runner.to(device);  // before the optimizer: its state is made where the parameters are
  runner.set_attention_entropy(run.entropy_weight);
  runner.set_checkpoint_activations(run.checkpoint_activations);
  Generator data(run.seed ^ 0x5eedda7aULL);
  auto params = runner.module().named_parameters();
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(run, params);
  std::unique_ptr<optim::Schedule> schedule = make_schedule(run);
  optim::NamedGenerators generators{{"default", &default_generator()}, {"data", &data}};
  if (run.resuming)
    optim::load_training_checkpoint(std::move(run.resumed), run.resume, runner.module(), opt.get(), generators);
  if (ranks > 1) {
    // Each rank read its own copy of --resume: the same flags, but maybe not the same file.
    // Different steps would make the ranks run different numbers of steps and hang in a collective.
    QKV_CHECK(dist::same_on_all_ranks(static_cast<uint64_t>(opt->steps())),
              "the ranks resumed from different checkpoints (their steps differ): give every rank the same file");
    std::vector<Tensor> parameters = runner.module().parameters();
    dist::broadcast(parameters);  // rank 0's, whatever the others built or loaded
    // Dropout draws its own stream on each rank; the data stream stays shared,
    // so every rank draws the same global batch and takes its slice.
    auto state = default_generator().state();
    default_generator().manual_seed(state[0] ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(me)));
  }

  train::Trainer trainer(*opt, *schedule, trainer_options(run, log_path, save, args.count("force") > 0));
  trainer.save_name = save;
  const auto metadata = checkpoint_metadata(runner, trainer.settings(run.settings), log_path, save);
  trainer.set_saved_step(run.resuming ? opt->steps() : -1, run.resume);
  trainer.loss = [&](int64_t) { return step_loss(runner, run, data, mine); };
  trainer.evaluate = [&](int64_t) { return evaluate(runner, run); };
  trainer.save = [&] {
    auto with_log = metadata;  // and what the log holds now, so --resume can tell it from another file
    if (std::string digest = trainer.log_digest(); !digest.empty()) with_log["qkv.log.digest"] = digest;
    optim::save_training_checkpoint(save, runner.module(), opt.get(), generators, with_log);
  };
  trainer.extra_log_value = [&] {
    return runner.last_entropy();
  };  // the loss includes the term; the term is logged apart
  // mpirun gives its ranks a terminal of their own: under it, lines at evaluations only.
  const bool tty = lead && !dist::active() && isatty(fileno(stdout));
  trainer.on_step = [&](const train::Progress& p) {
    // Tasks stop at their target, so their ETA is an upper bound.
    std::string line =
        train::progress_line(p, run.target > 0 && (runner.task() || (runner.label_task() && run.target < 1)));
    if (tty) std::printf("\r\033[K%s", line.c_str());
    if (p.evaluation) std::printf(tty ? "\r\033[K%s  %s\n" : "%s  %s\n", line.c_str(), p.evaluation->text.c_str());
    std::fflush(stdout);
  };

  if (lead) print_banner(runner, run, *opt, runner.module().num_parameters());
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_interrupt);
  bool grads_ok = true;
  if (lead && args.count("check-grads")) grads_ok = check_gradients(runner, data, "before training") && grads_ok;
  train::Outcome out;
  try {
    out = trainer.run();
  } catch (...) {
    if (tty) std::printf("\n");  // the error goes below the progress line, not over it
    std::fflush(stdout);
    throw;
  }
  if (tty) std::printf("\n");
  auto finish = [&](int code) {
    // A full disk or a closed pipe must not end in exit 0.
    QKV_CHECK(std::fflush(stdout) == 0 && !std::ferror(stdout), "cannot write the output: ", std::strerror(errno));
    return code;
  };
  if (out.reason == train::Outcome::Stopped) {
    if (lead)
      std::printf("interrupted at step %lld: saved %s (continue with: qkv train --resume %s)\n",
                  static_cast<long long>(out.steps), printable(save).c_str(), printable(save).c_str());
    return finish(130);
  }
  if (lead && args.count("check-grads")) grads_ok = check_gradients(runner, data, "after training") && grads_ok;
  if (lead) {
    std::printf("%s after %lld step%s in %s: saved %s\n",
                out.reason == train::Outcome::Target ? "reached the target" : "finished",
                static_cast<long long>(out.steps), out.steps == 1 ? "" : "s", train::duration(out.elapsed_s).c_str(),
                printable(save).c_str());
    // The run in brief: where its work is and how good it got.
    if (!std::isnan(out.best_metric))
      std::printf("best held-out %s %.4f at step %lld (last %.4f)\n",
                  runner.task()                        ? "exact match"
                  : !runner.label_task()               ? "loss (nats/byte)"
                  : runner.label_task()->ranks_items() ? "HR@10"
                                                       : "accuracy",
                  out.best_metric, static_cast<long long>(out.best_step), out.last_metric);
    if (!log_path.empty())
      std::printf("log: %s (draw it: qkv plot %s)\n", printable(log_path).c_str(), printable(log_path).c_str());
  }
  return finish(grads_ok ? 0 : 1);
}

}  // namespace qkv::cli
