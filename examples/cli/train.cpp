// qkv train: flags -> a model, a task and training settings -> the library's
// Trainer (train/trainer.h), which runs the loop, evaluates, logs and saves.
// Here: the flags, the resume merge, where the work goes, progress lines.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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
#include "dist/dist.h"
#include "io/metadata.h"
#include "io/output.h"
#include "optim/optim.h"
#include "runner.h"
#include "train/trainer.h"

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

// Bytes a training step needs, roughly and on the high side: parameters,
// gradients and two optimizer moments (16 bytes each), and per token of the
// batch each layer's saved activations and their gradients (about 40 floats
// per channel, plus attention weights on the composed path) and the logits.
double training_bytes(const ModelSpec& s, int64_t batch) {
  double tokens = static_cast<double>(batch) * static_cast<double>(s.context);
  double layers = static_cast<double>(s.layers) * driver_kind(s.model).blocks_per_layer;
  double per_token = layers * (40.0 * static_cast<double>(s.width) + 2.0 * static_cast<double>(s.heads * s.context)) +
                     3.0 * static_cast<double>(s.vocab);
  return 16.0 * static_cast<double>(s.parameter_count()) + 4.0 * tokens * per_token;
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
// Returns how many lines were dropped; the log is rewritten atomically. A
// file with any other line is not a qkv log: it is refused, never trimmed.
int64_t trim_log(const std::string& path, int64_t step) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;  // a new log
  std::string text = io::read_regular_file(path, int64_t{1} << 30, "--log file");
  std::string kept;
  int64_t dropped = 0, number = 0;
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
      QKV_CHECK(row_start || header, "--log ", printable(path), ": line ", number,
                " is not a qkv log row; choose another --log (qkv rewrites a resumed run's log)");
      ++dropped;
      break;
    }
    at = end + 1;
    QKV_CHECK(header || s >= 0, "--log ", printable(path), ": line ", number,
              " is not a qkv log row; choose another --log (qkv rewrites a resumed run's log)");
    if (header || s <= step)
      kept += line + "\n";
    else
      ++dropped;
  }
  if (dropped > 0) io::write_file(path, kept);
  return dropped;
}

// Whether two paths name one file (or, for a file not there yet, one path).
bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) return std::filesystem::equivalent(a, b, ec);
  return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
}

std::string kind_names() {
  std::string names;
  for (const std::string& n : nn::model_kind_names()) names += (names.empty() ? "" : " | ") + n;
  return names;
}

// Each task's defaults, where they differ from the sequence tasks'. The
// bundled text is small (28 KB): fewer, smaller steps and dropout keep the
// held-out loss falling instead of memorising the training part. The digits
// are 1,438 training images: dropout, and every step until the budget (their
// held-out split is the test set: no target stops on it by default).
struct TaskDefaults {
  int64_t batch = 64, eval_every = 250, steps = 4000, max_len = 8, layers = 2;
  double lr = 0.001, dropout = 0, target = 0.99;
};
TaskDefaults defaults_for(const std::string& task) {
  TaskDefaults d;
  if (task == "text") d.batch = 32, d.eval_every = 100, d.steps = 800, d.lr = 0.003, d.dropout = 0.2;
  // Two layers stalled near 95% on brackets; four, at 2e-3, passed 99% within 2,000 steps.
  if (task == "brackets") d.max_len = 12, d.layers = 4, d.lr = 0.002, d.steps = 6000, d.target = 0.995;
  if (task == "digits") d.batch = 128, d.eval_every = 500, d.steps = 4000, d.dropout = 0.1, d.target = 1.0;
  if (task == "sessions")
    d.max_len = 20, d.steps = 800, d.dropout = 0.1, d.target = 1.0;  // 1,000 users: longer overfits
  return d;
}

cxxopts::Options train_options() {
  cxxopts::Options options("qkv train",
                           "Train a model on a task and save a checkpoint.\n"
                           "The progress line's loss is an exponential moving average over about 20 steps "
                           "(the --log file has each step's own loss).");
  options.add_options("model and task (fixed by the checkpoint on --resume)")(
      "task", "copy | reverse | sort | add | text | brackets | digits | sessions (default reverse)",
      cxxopts::value<std::string>(),
      "NAME")("data", "the text for --task text, the image CSV for digits (default: the bundled one)",
              cxxopts::value<std::string>(), "FILE")(
      "model", kind_names() + " (default: gpt; encoder for brackets, vit for digits, recommender for sessions)",
      cxxopts::value<std::string>(),
      "KIND")("max-len",
              cat("longest input for copy, reverse, sort (default 8) and brackets (default 12), longest history for "
                  "sessions (default 20), in ",
                  range(1, kMaxInputLength)),
              cxxopts::value<int64_t>(), "N")(
      "patch", "vit: the side of a square patch, dividing the image's (default 2)", cxxopts::value<int64_t>(), "P")(
      "pooling", "encoder: cls (a learned [CLS] token) | mean (over the unpadded tokens) (default cls)",
      cxxopts::value<std::string>(), "HOW")(
      "digits", cat("operand digits for add, in ", range(1, kMaxDigits), " (default 3)"), cxxopts::value<int64_t>(),
      "N")("layers",
           cat("transformer layers, per side for seq2seq, in ", range(1, kMaxLayers), " (default 2; 4 for brackets)"),
           cxxopts::value<int64_t>(),
           "N")("heads", "attention heads, dividing --dim (default 4)", cxxopts::value<int64_t>(), "N")(
      "dim", cat("model width, in ", range(1, kMaxWidth), " (default 64)"), cxxopts::value<int64_t>(), "N")(
      "attention", "full | window:W (a token sees the W before it) | linear (default full)",
      cxxopts::value<std::string>(), "KIND")(
      "context", cat("context length, in ", range(1, kMaxContext), " (default: what the task needs; 64 for text)"),
      cxxopts::value<int64_t>(),
      "N")("dropout", "dropout probability (default 0; 0.2 for text)", cxxopts::value<double>(), "P");
  options.add_options("training (fixed by the checkpoint on --resume)")(
      "batch",
      cat("examples per step, in ", range(1, kMaxBatch),
          " (default 64; 32 for text); under mpirun the "
          "global batch, split into contiguous slices, one per rank"),
      cxxopts::value<int64_t>(),
      "N")("lr", "peak learning rate (default 0.001; 0.003 for text)", cxxopts::value<double>(), "LR")(
      "optimizer", "adamw | adam | sgd (default adamw)", cxxopts::value<std::string>(), "NAME")(
      "schedule", "constant | cosine (default cosine)", cxxopts::value<std::string>(), "NAME")(
      "warmup", "warm-up steps (default 100)", cxxopts::value<int64_t>(), "N")(
      "weight-decay", "weight decay (default 0.01)", cxxopts::value<double>(), "W")(
      "clip", "gradient norm limit, 0 for none (default 1)", cxxopts::value<double>(), "NORM")(
      "seed", "random seed (default 1)", cxxopts::value<uint64_t>(), "N")(
      "target",
      "tasks: stop when the held-out metric (exact match, accuracy, HR@10) reaches this (default 0.99; 1 for "
      "digits and sessions)",
      cxxopts::value<double>(),
      "FRACTION")("attn-entropy",
                  "add this x the mean attention entropy to the loss, in [-100, 100]; < 0 spreads attention "
                  "(default 0)",
                  cxxopts::value<double>(),
                  "LAMBDA")("checkpoint-activations", "recompute each block in backward: less memory, more time");
  options.add_options("the run (may change on --resume)")(
      "steps", "step budget, counting resumed steps (default 4000; 800 for text)", cxxopts::value<int64_t>(), "N")(
      "save", "checkpoint file (default: the resumed file, else a new <task>[-N].safetensors)",
      cxxopts::value<std::string>(), "FILE")("force", "let --save and --log replace files of another run")(
      "save-every", "also save every N steps (default 0: at the end only)", cxxopts::value<int64_t>(), "N")(
      "eval-every", "steps between evaluations (default 250; 100 for text)", cxxopts::value<int64_t>(), "N")(
      "resume", "continue the run saved in a checkpoint, with its settings", cxxopts::value<std::string>(), "FILE")(
      "log", "per-step log: CSV if FILE ends in .csv, else JSON lines (appended to on --resume)",
      cxxopts::value<std::string>(),
      "FILE")("threads", "threads per process (default 0: one per idle core, shared by the ranks on this machine)",
              cxxopts::value<int>(), "N")("device", kDeviceHelp, cxxopts::value<std::string>(), "DEVICE")(
      "check-grads", "gradient-check a float64 copy of the model before the first step and at the end")(
      "h,help", "show this help");
  return options;
}

// A new run's model and task from the flags; flags the task does not use are mistakes.
ModelSpec spec_from_flags(const cxxopts::ParseResult& args) {
  ModelSpec spec;
  auto str = [&](const char* name, const char* fallback) {
    return args.count(name) ? args[name].as<std::string>() : std::string(fallback);
  };
  auto num = [&](const char* name, int64_t fallback) { return args.count(name) ? args[name].as<int64_t>() : fallback; };
  spec.task = str("task", "reverse");
  spec.model = args.count("model") ? args["model"].as<std::string>() : default_kind(spec.task);
  const bool is_text = spec.task == "text";
  const TaskDefaults defaults = defaults_for(spec.task);
  // Flags that the chosen task does not use are mistakes, not no-ops.
  QKV_CHECK(is_text || spec.task == "digits" || !args.count("data"), "--data is for --task text and digits");
  QKV_CHECK(!args.count("max-len") || spec.task == "copy" || spec.task == "reverse" || spec.task == "sort" ||
                spec.task == "brackets" || spec.task == "sessions",
            "--max-len is for --task copy, reverse, sort, brackets or sessions");
  QKV_CHECK(!args.count("digits") || spec.task == "add", "--digits is for --task add");
  QKV_CHECK(!args.count("patch") || spec.model == "vit", "--patch is for --model vit");
  QKV_CHECK(!args.count("pooling") || spec.model == "encoder", "--pooling is for --model encoder");
  QKV_CHECK(!is_text || !args.count("target"), "--target is for the tasks with a held-out score, not text");
  spec.data = str("data", "");  // "": the bundled text or digits
  QKV_CHECK(!args.count("data") || !spec.data.empty(), "--data needs a file name");
  spec.max_len = num("max-len", defaults.max_len);
  if (args.count("patch")) {
    spec.patch = args["patch"].as<int64_t>();
    check_range("patch", spec.patch, 1, nn::kMaxImage);
  }
  spec.pooling = str("pooling", "cls");
  nn::parse_pooling(spec.pooling);
  spec.digits = num("digits", 3);
  spec.layers = num("layers", defaults.layers);
  spec.heads = num("heads", 4);
  spec.width = num("dim", 64);
  spec.context = num("context", 0);
  QKV_CHECK(!args.count("context") || spec.context > 0, "--context must be positive, got ", spec.context);
  spec.dropout = args.count("dropout") ? args["dropout"].as<double>() : defaults.dropout;
  // Below 1e-6 a probability is a typo (and 1e-320 once wrote a checkpoint qkv could not read).
  QKV_CHECK(spec.dropout == 0 || (spec.dropout >= 1e-6 && spec.dropout < 1),
            "--dropout must be 0 or in [1e-6, 1), got ", spec.dropout);
  spec.attention = nn::AttentionKind::parse(str("attention", "full")).str();
  spec.check_sizes();  // the bounds loading applies: training never writes what loading refuses
  return spec;
}

// A run resolved from its flags, else the resumed checkpoint's settings, else the defaults.
struct Run {
  bool resuming = false;
  std::string resume;      // the checkpoint resumed ("" for a new run)
  io::TensorFile resumed;  // its contents, read once
  ModelSpec spec;
  std::map<std::string, std::string> settings;  // recorded in the checkpoint (qkv.train)
  int64_t batch = 0, eval_every = 0, total = 0, save_every = 0, warmup = 0;
  double lr = 0, weight_decay = 0, clip = 0, target = 0, entropy_weight = 0;
  std::string optimizer, schedule;
  uint64_t seed = 1;
  bool checkpoint_activations = false;
};

// On --resume the checkpoint holds the model, the task and the training
// settings; only the run's own flags may change.
Run resolve(const cxxopts::ParseResult& args) {
  Run run;
  run.resuming = args.count("resume") > 0;
  const bool resuming = run.resuming;
  run.resume = resuming ? args["resume"].as<std::string>() : "";
  const std::string& resume = run.resume;
  QKV_CHECK(!resuming || !resume.empty(), "--resume needs a checkpoint file");

  io::TensorFile& resumed = run.resumed;
  std::map<std::string, std::string> saved;  // the checkpoint's training settings
  if (resuming) {
    static const std::set<std::string> may_change{"resume",      "steps",      "save",  "force",
                                                  "save-every",  "eval-every", "log",   "threads",
                                                  "check-grads", "data",       "device"};
    for (const auto& kv : args.arguments())
      QKV_CHECK(may_change.count(kv.key()), "--", kv.key(),
                " cannot change on --resume: the checkpoint holds the run's "
                "settings (--resume takes --steps --save --force --save-every --eval-every --log --threads --device "
                "--check-grads, "
                "and --data for text)");
    resumed = io::load_safetensors(resume);
    if (resumed.metadata.count("qkv.train")) saved = io::parse_json_object(resumed.metadata.at("qkv.train"));
  }
  ModelSpec& spec = run.spec;
  if (resuming) {
    spec = ModelSpec::from_metadata(resumed.metadata, resume);
    spec.check_tensors(resumed, resume);  // before the model is built
    // A text run resumes on the text named here, or on the bundled text if it
    // trained on that: qkv never opens a path read from a checkpoint.
    if (spec.task == "text" || spec.task == "digits") {
      QKV_CHECK(args.count("data") || spec.data.empty(), printable(resume), " trained on '", printable(spec.data),
                "': give its data again with --data FILE");
      if (args.count("data")) spec.data = args["data"].as<std::string>();
    } else {
      QKV_CHECK(!args.count("data"), "--data is for text and digits models; ", printable(resume), " is a ", spec.task,
                " model");
    }
  } else {
    spec = spec_from_flags(args);
  }
  const TaskDefaults defaults = defaults_for(spec.task);

  // Training settings: the flag, else the checkpoint's, else the default.
  std::map<std::string, std::string>& settings = run.settings;
  auto setting = [&](const char* name, const std::string& flag_value, const std::string& fallback) {
    std::string v = args.count(name) ? flag_value : saved.count(name) ? saved.at(name) : fallback;
    settings[name] = v;
    return v;
  };
  auto int_setting = [&](const char* name, int64_t fallback) {
    std::string v =
        setting(name, args.count(name) ? std::to_string(args[name].as<int64_t>()) : "", std::to_string(fallback));
    int64_t out = 0;
    QKV_CHECK(io::parse_integer(v, out), printable(resume), ": bad training setting ", name, " = '", printable(v), "'");
    return out;
  };
  auto real_setting = [&](const char* name, double fallback) {
    return io::parse_number(
        setting(name, args.count(name) ? io::exact_number(args[name].as<double>()) : "", io::exact_number(fallback)),
        cat("--", name));
  };
  auto word_setting = [&](const char* name, const char* fallback) {
    return setting(name, args.count(name) ? args[name].as<std::string>() : "", fallback);
  };
  const int64_t batch = run.batch = int_setting("batch", defaults.batch);
  const int64_t eval_every = run.eval_every = int_setting("eval-every", defaults.eval_every);
  const int64_t total = run.total = int_setting("steps", defaults.steps);
  const int64_t save_every = run.save_every = int_setting("save-every", 0);
  const int64_t warmup_setting = run.warmup = int_setting("warmup", 100);
  // 3e-3 on add stalls at ~10% in some runs (a carry plateau); 1e-3 reached the
  // target in every task and seed tried. Text keeps 3e-3 for its short schedule.
  const double lr = run.lr = real_setting("lr", defaults.lr);
  run.weight_decay = real_setting("weight-decay", 0.01);
  const double clip = run.clip = real_setting("clip", 1.0);
  run.target = real_setting("target", defaults.target);
  const double entropy_weight = run.entropy_weight = real_setting("attn-entropy", 0);
  run.optimizer = word_setting("optimizer", "adamw");
  run.schedule = word_setting("schedule", "cosine");
  uint64_t& seed = run.seed;
  if (args.count("seed")) {
    seed = args["seed"].as<uint64_t>();
  } else if (saved.count("seed")) {
    const std::string& v = saved.at("seed");
    QKV_CHECK(!v.empty() && v.size() <= 20 && v.find_first_not_of("0123456789") == std::string::npos, printable(resume),
              ": bad training setting seed = '", printable(v), "'");
    seed = std::stoull(v);
  }
  settings["seed"] = std::to_string(seed);
  run.checkpoint_activations = args.count("checkpoint-activations") > 0 ||
                               (saved.count("checkpoint-activations") && saved.at("checkpoint-activations") == "1");
  settings["checkpoint-activations"] = run.checkpoint_activations ? "1" : "0";
  check_range("batch", batch, 1, kMaxBatch);
  check_range("eval-every", eval_every, 1, kMaxSteps);
  check_range("steps", total, 0, kMaxSteps);
  check_range("warmup", warmup_setting, 0, kMaxSteps);
  check_range("save-every", save_every, 0, kMaxSteps);
  QKV_CHECK(std::isfinite(lr) && lr > 0, "--lr must be positive and finite, got ", lr);
  QKV_CHECK(clip >= 0, "--clip must be >= 0, got ", clip);
  // A weight far past the loss's own size only turns the loss into the entropy term (1e308 overflowed it).
  QKV_CHECK(entropy_weight >= -100 && entropy_weight <= 100, "--attn-entropy must be in [-100, 100], got ",
            entropy_weight);
  return run;
}

// Where the work goes, checked before the first step: a run must not train
// for an hour and then find it cannot save, or replace another run's file.
// Returns the checkpoint's path; trims a resumed run's log to its checkpoint.
std::string check_outputs(const cxxopts::ParseResult& args, const Run& run, const std::string& log_path) {
  const bool force = args.count("force") > 0;
  std::string save = args.count("save") ? args["save"].as<std::string>()
                     : run.resuming     ? run.resume
                                        : fresh_name(run.spec.task);
  QKV_CHECK(!save.empty(), "--save needs a file name");
  if (dist::rank() != 0) return save;  // rank 0 alone saves and logs
  std::error_code ec;
  auto status = std::filesystem::symlink_status(save, ec);
  // A folder, link or device is refused whatever the flags: --force would not help.
  QKV_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status), "--save ", printable(save),
            " is ",
            std::filesystem::is_directory(status) ? "a folder"
            : std::filesystem::is_symlink(status) ? "a symbolic link"
                                                  : "not a regular file",
            ": give a checkpoint file name");
  bool exists = std::filesystem::exists(status);
  bool continuing =
      run.resuming && std::filesystem::exists(run.resume) && std::filesystem::equivalent(save, run.resume, ec);
  QKV_CHECK(!exists || continuing || force, printable(save),
            " already exists: choose another --save, continue its run "
            "with --resume ",
            printable(save), ", or replace it with --force");
  QKV_CHECK(!args.count("data") || !same_file(save, args["data"].as<std::string>()), "--save ", printable(save),
            " is this run's --data file: choose another --save");
  io::make_parent_folders(save, "--save");
  io::check_writable_target(save);
  if (log_path.empty()) return save;
  // The log is written to (and on --resume rewritten): never one of the run's other files.
  const std::string data = args.count("data") ? args["data"].as<std::string>() : "";
  for (const auto& [other, flag] :
       {std::pair{save, "--save"}, std::pair{run.resume, "--resume"}, std::pair{data, "--data"}})
    QKV_CHECK(!same_file(log_path, other), "--log ", printable(log_path), " is this run's ", flag,
              " file: choose another --log");
  exists = std::filesystem::exists(std::filesystem::symlink_status(log_path, ec));
  // Resuming continues its log; a fresh run never mixes itself into an old one.
  QKV_CHECK(!exists || run.resuming || force, "--log ", printable(log_path),
            " already exists: choose another file, "
            "or replace it with --force");
  io::make_parent_folders(log_path, "--log");
  io::check_writable_target(log_path, /*probe=*/false);
  if (run.resuming) {
    int64_t step = -1;
    QKV_CHECK(run.resumed.metadata.count("qkv.step") && io::parse_integer(run.resumed.metadata.at("qkv.step"), step) &&
                  step >= 0,
              printable(run.resume), ": no training step in its metadata");
    if (int64_t dropped = trim_log(log_path, step))
      std::printf("--log %s: dropped %lld line%s past the checkpoint's step %lld (written after it was saved)\n",
                  printable(log_path).c_str(), static_cast<long long>(dropped), dropped == 1 ? "" : "s",
                  static_cast<long long>(step));
  }
  return save;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Run& run, const optim::NamedTensors& params) {
  if (run.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{run.lr, 0.9, 0, run.weight_decay, true});
  QKV_CHECK(run.optimizer == "adamw" || run.optimizer == "adam", "unknown --optimizer '", printable(run.optimizer),
            "' (adamw, adam, sgd)");
  optim::AdamOptions o;
  o.lr = run.lr, o.weight_decay = run.weight_decay;
  if (run.optimizer == "adamw") return std::make_unique<optim::AdamW>(params, o);
  return std::make_unique<optim::Adam>(params, o);
}

std::unique_ptr<optim::Schedule> make_schedule(const Run& run) {
  const int64_t warmup = std::min(run.warmup, run.total);
  if (run.schedule == "cosine")
    return std::make_unique<optim::CosineLR>(run.lr, warmup, std::max(run.total, warmup), run.lr * 0.1);
  if (run.schedule == "constant") return std::make_unique<optim::ConstantLR>(run.lr);
  throw Error(cat("unknown --schedule '", printable(run.schedule), "' (constant, cosine)"));
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
    e.reached = e.metric >= run.target;
  } else if (runner.task()) {
    e.metric = runner.accuracy(500, held_out);
    e.text = cat("held-out exact match ", std::to_string(100 * e.metric).substr(0, 5), "%");
    e.reached = e.metric >= run.target;
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
  const std::string log_path = args.count("log") ? args["log"].as<std::string>() : "";
  const std::string save = check_outputs(args, run, log_path);

  manual_seed(run.seed);
  Runner runner(run.spec);
  runner.to(device);  // before the optimizer: its state is made where the parameters are
  check_fits_in_memory(training_bytes(runner.spec(), mine.count),
                       cat("training this model on --batch ", run.batch, ranks > 1 ? " (this rank's share)" : "",
                           " (parameters, gradients, optimizer state, activations)"),
                       "use a smaller --batch, --dim, --layers or --context");
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

  train::TrainerOptions to;
  to.steps = run.total, to.eval_every = run.eval_every, to.save_every = run.save_every, to.clip = run.clip;
  to.log = log_path, to.append_log = run.resuming;
  to.extra_log_column = run.entropy_weight != 0;
  if (run.entropy_weight != 0) to.divergence_advice += ", or a smaller --attn-entropy";
  train::Trainer trainer(params, *opt, *schedule, to);
  trainer.save_name = save;
  const auto metadata = checkpoint_metadata(runner, trainer.settings(run.settings), log_path, save);
  trainer.set_saved_step(run.resuming ? opt->steps() : -1);
  trainer.loss = [&](int64_t) { return step_loss(runner, run, data, mine); };
  trainer.evaluate = [&](int64_t) { return evaluate(runner, run); };
  trainer.save = [&] { optim::save_training_checkpoint(save, runner.module(), opt.get(), generators, metadata); };
  trainer.extra_log_value = [&] {
    return runner.last_entropy();
  };  // the loss includes the term; the term is logged apart
  // mpirun gives its ranks a terminal of their own: under it, lines at evaluations only.
  const bool tty = lead && !dist::active() && isatty(fileno(stdout));
  trainer.on_step = [&](const train::Progress& p) {
    // Tasks stop at their target, so their ETA is an upper bound.
    std::string line =
        train::progress_line(p, (runner.task() && run.target <= 1) || (runner.label_task() && run.target < 1));
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
    std::printf("%s after %lld steps in %s: saved %s\n",
                out.reason == train::Outcome::Target ? "reached the target" : "finished",
                static_cast<long long>(out.steps), train::duration(out.elapsed_s).c_str(), printable(save).c_str());
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
