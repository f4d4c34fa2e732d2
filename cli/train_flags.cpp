// qkv train's flags, and the run they resolve to: on a new run the flags,
// else each task's defaults; on --resume the checkpoint's model, task and
// settings, with only the run's own flags (steps, save, log, ...) changing.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "bounds.h"
#include "commands.h"
#include "io/metadata.h"
#include "train_flags.h"

namespace qkv::cli {

namespace {

// "a | b | c": a flag's choices, for its help.
template <class Names> std::string choices(const Names& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : " | ") + std::string(name);
  return text;
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

const char* const kTasks[] = {"copy", "reverse", "sort", "add", "text", "brackets", "digits", "sessions"};

// "default V; W for text, X for digits and sessions": the sequence tasks'
// value, then each other value with its tasks, read from defaults_for itself
// so that --help cannot drift from what a run uses.
template <class V> std::string defaults_text(V TaskDefaults::*field) {
  const V base = TaskDefaults{}.*field;
  std::vector<std::pair<V, std::vector<std::string>>> others;
  for (const char* task : kTasks) {
    const V value = defaults_for(task).*field;
    if (value == base) continue;
    auto same = std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == value; });
    if (same == others.end())
      others.push_back({value, {task}});
    else
      same->second.push_back(task);
  }
  std::string text = cat("default ", base);
  for (size_t i = 0; i < others.size(); ++i) {
    text += cat(i == 0 ? "; " : ", ", others[i].first, " for ");
    const std::vector<std::string>& tasks = others[i].second;
    for (size_t t = 0; t < tasks.size(); ++t) text += (t == 0 ? "" : t + 1 == tasks.size() ? " and " : ", ") + tasks[t];
  }
  return text;
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
  spec.attention = attention_flag(str("attention", "full")).str();
  spec.check_sizes();  // the bounds loading applies: training never writes what loading refuses
  return spec;
}

// A resumed run's step, and a budget past it: one the checkpoint has spent would only save it again.
void check_budget(Run& run, const std::string& steps_flag) {
  int64_t& at = run.resumed_step;
  const auto step = run.resumed.metadata.find("qkv.step");
  QKV_CHECK(step != run.resumed.metadata.end(), printable(run.resume), ": no training step in its metadata");
  QKV_CHECK(io::parse_integer(step->second, at) && at >= 0 && at <= kMaxSteps, printable(run.resume),
            ": bad training step '", printable(step->second), "' in its metadata (a step count in ",
            range(0, kMaxSteps), ")");
  QKV_CHECK(run.total > at, printable(run.resume), " is already at step ", at, ", and ", steps_flag, " is ", run.total,
            at < kMaxSteps ? ": give a larger --steps to train on" : ", the most qkv trains");
}

// The real-valued settings' bounds; `source` names a setting's flag (and the checkpoint it came from).
void check_real_settings(const Run& run, const std::function<std::string(const char*)>& source, bool decay_given) {
  QKV_CHECK(std::isfinite(run.lr) && run.lr > 0, source("lr"), " must be positive and finite, got ", run.lr);
  QKV_CHECK(run.clip >= 0, source("clip"), " must be >= 0, got ", run.clip);
  // A decay is a small fraction of the weights a step (1 − lr·wd for AdamW): one of 1e300 saved a checkpoint
  // of infinities, and past lr·wd = 1 the weights flip sign and grow. lr·wd is checked where the user sets
  // the decay (a huge --lr alone, as the tests' way to diverge, meets the loss's own check).
  QKV_CHECK(run.weight_decay >= 0 && run.weight_decay <= 1000, source("weight-decay"), " must be in [0, 1000], got ",
            run.weight_decay);
  QKV_CHECK(!decay_given || run.lr * run.weight_decay <= 1, "--weight-decay ", run.weight_decay, " at lr ", run.lr,
            ": each step would scale the weights by 1 - lr x decay = ", 1 - run.lr * run.weight_decay,
            "; keep lr x decay at most 1");
  // A score is a fraction (-1 once stopped at the first evaluation, "reached" at 0%); 0 sets no target.
  QKV_CHECK(run.spec.task == "text" || (run.target >= 0 && run.target <= 1), source("target"),
            " must be in [0, 1], got ", run.target);
  // A weight far past the loss's own size only turns the loss into the entropy term (1e308 overflowed it).
  QKV_CHECK(run.entropy_weight >= -100 && run.entropy_weight <= 100, source("attn-entropy"),
            " must be in [-100, 100], got ", run.entropy_weight);
}

}  // namespace

cxxopts::Options train_options() {
  cxxopts::Options options("qkv train",
                           "Train a model on a task and save a checkpoint.\n"
                           "The progress line's loss is an exponential moving average over about 20 steps "
                           "(the --log file has each step's own loss).");
  options.add_options("model and task (fixed by the checkpoint on --resume)")(
      "task", choices(kTasks) + " (default reverse)", cxxopts::value<std::string>(), "NAME")(
      "data", "the text for --task text, the image CSV for digits (default: the bundled one)",
      cxxopts::value<std::string>(),
      "FILE")("model",
              choices(nn::model_kind_names()) +
                  " (default: gpt; encoder for brackets, vit for digits, recommender for sessions)",
              cxxopts::value<std::string>(),
              "KIND")("max-len",
                      cat("longest input (copy, reverse, sort, brackets) or history (sessions), in ",
                          range(1, kMaxInputLength), " (", defaults_text(&TaskDefaults::max_len), ")"),
                      cxxopts::value<int64_t>(), "N")(
      "patch", "vit: the side of a square patch, dividing the image's (default 2)", cxxopts::value<int64_t>(), "P")(
      "pooling", "encoder: cls (a learned [CLS] token) | mean (over the unpadded tokens) (default cls)",
      cxxopts::value<std::string>(),
      "HOW")("digits", cat("operand digits for add, in ", range(1, kMaxDigits), " (default 3)"),
             cxxopts::value<int64_t>(), "N")("layers",
                                             cat("transformer layers, per side for seq2seq, in ", range(1, kMaxLayers),
                                                 " (", defaults_text(&TaskDefaults::layers), ")"),
                                             cxxopts::value<int64_t>(), "N")(
      "heads", "attention heads, dividing --dim (default 4)", cxxopts::value<int64_t>(), "N")(
      "dim", cat("model width, in ", range(1, kMaxWidth), " (default 64)"), cxxopts::value<int64_t>(), "N")(
      "attention", "full | window:W (a token sees the W before it) | linear (default full)",
      cxxopts::value<std::string>(), "KIND")(
      "context", cat("context length, in ", range(1, kMaxContext), " (default: what the task needs; 64 for text)"),
      cxxopts::value<int64_t>(),
      "N")("dropout", cat("dropout probability (", defaults_text(&TaskDefaults::dropout), ")"),
           cxxopts::value<double>(), "P");
  options.add_options("training (fixed by the checkpoint on --resume)")(
      "batch",
      cat("examples per step, in ", range(1, kMaxBatch), " (", defaults_text(&TaskDefaults::batch),
          "); under mpirun the "
          "global batch, split into contiguous slices, one per rank"),
      cxxopts::value<int64_t>(),
      "N")("lr", cat("peak learning rate (", defaults_text(&TaskDefaults::lr), ")"), cxxopts::value<double>(), "LR")(
      "optimizer", "adamw | adam | sgd (default adamw)", cxxopts::value<std::string>(), "NAME")(
      "schedule", "constant | cosine (default cosine)", cxxopts::value<std::string>(), "NAME")(
      "warmup", "warm-up steps (default 100)", cxxopts::value<int64_t>(), "N")(
      "weight-decay", "weight decay (default 0.01)", cxxopts::value<double>(), "W")(
      "clip", "gradient norm limit, 0 for none (default 1)", cxxopts::value<double>(), "NORM")(
      "seed", "random seed (default 1)", cxxopts::value<uint64_t>(), "N")(
      "target",
      cat("tasks: stop when the held-out metric (exact match, accuracy, HR@10) reaches this, in [0, 1]; 0 sets "
          "none (",
          defaults_text(&TaskDefaults::target), ")"),
      cxxopts::value<double>(),
      "FRACTION")("attn-entropy",
                  "add this x the mean attention entropy to the loss, in [-100, 100]; < 0 spreads attention "
                  "(default 0)",
                  cxxopts::value<double>(),
                  "LAMBDA")("checkpoint-activations", "recompute each block in backward: less memory, more time");
  options.add_options("the run (may change on --resume)")(
      "steps", cat("step budget, counting resumed steps (", defaults_text(&TaskDefaults::steps), ")"),
      cxxopts::value<int64_t>(),
      "N")("save", "checkpoint file (default: the resumed file, else a new <task>[-N].safetensors)",
           cxxopts::value<std::string>(), "FILE")("force", "let --save and --log replace files of another run")(
      "save-every", "also save every N steps (default 0: at the end only)", cxxopts::value<int64_t>(), "N")(
      "eval-every", cat("steps between evaluations (", defaults_text(&TaskDefaults::eval_every), ")"),
      cxxopts::value<int64_t>(), "N")("resume", "continue the run saved in a checkpoint, with its settings",
                                      cxxopts::value<std::string>(), "FILE")(
      "log", "per-step log: CSV if FILE ends in .csv (or .CSV), else JSON lines (a resumed run continues its own)",
      cxxopts::value<std::string>(),
      "FILE")("threads", "threads per process (default 0: one per idle core, shared by the ranks on this machine)",
              cxxopts::value<int>(), "N")("device", kDeviceHelp, cxxopts::value<std::string>(), "DEVICE")(
      "check-grads", "gradient-check a float64 copy of the model before the first step and at the end")(
      "h,help", "show this help");
  return options;
}

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
                "and --data for text and digits)");
    resumed = io::load_safetensors(resume);
    if (resumed.metadata.count("qkv.train")) saved = io::metadata_object(resumed.metadata, "qkv.train", resume);
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
  // A setting's name in its errors: the flag, and the checkpoint when the value is the checkpoint's.
  auto source = [&](const char* name) {
    return !args.count(name) && saved.count(name) ? cat("--", name, " (from ", printable(resume), ")")
                                                  : cat("--", name);
  };
  auto real_setting = [&](const char* name, double fallback) {
    return io::parse_number(
        setting(name, args.count(name) ? io::exact_number(args[name].as<double>()) : "", io::exact_number(fallback)),
        source(name));
  };
  auto word_setting = [&](const char* name, const char* fallback, const std::vector<std::string>& words) {
    std::string v = setting(name, args.count(name) ? args[name].as<std::string>() : "", fallback), known;
    for (const std::string& w : words) known += (known.empty() ? "" : ", ") + w;
    QKV_CHECK(std::find(words.begin(), words.end(), v) != words.end(), "unknown ", source(name), " '", printable(v),
              "' (", known, ")");
    return v;
  };
  auto in_range = [&](const char* name, int64_t v, int64_t low, int64_t high) {
    QKV_CHECK(v >= low && v <= high, source(name), " must be in ", range(low, high), ", got ", v);
  };
  const int64_t batch = run.batch = int_setting("batch", defaults.batch);
  const int64_t eval_every = run.eval_every = int_setting("eval-every", defaults.eval_every);
  const int64_t total = run.total = int_setting("steps", defaults.steps);
  const int64_t save_every = run.save_every = int_setting("save-every", 0);
  const int64_t warmup_setting = int_setting("warmup", 100);
  // 3e-3 on add stalls at ~10% in some runs (a carry plateau); 1e-3 reached the
  // target in every task and seed tried. Text keeps 3e-3 for its short schedule.
  const double lr = run.lr = real_setting("lr", defaults.lr);
  run.weight_decay = real_setting("weight-decay", 0.01);
  const double clip = run.clip = real_setting("clip", 1.0);
  // Text has no held-out score to reach: its checkpoint records no target (info showed one train refuses).
  run.target = spec.task == "text" ? 0 : real_setting("target", defaults.target);
  if (!args.count("target") && (run.target < 0 || run.target > 1))  // recorded before targets were bounded:
    run.target = 0, settings["target"] = "0";                       // 2 meant "never stop", as 0 does now
  const double entropy_weight = run.entropy_weight = real_setting("attn-entropy", 0);
  run.optimizer = word_setting("optimizer", "adamw", kOptimizers);
  run.schedule = word_setting("schedule", "cosine", kSchedules);
  uint64_t& seed = run.seed;
  if (args.count("seed")) {
    seed = args["seed"].as<uint64_t>();
  } else if (saved.count("seed")) {
    const std::string& v = saved.at("seed");
    auto [end, error] = std::from_chars(v.data(), v.data() + v.size(), seed);  // no sign, space or overflow
    QKV_CHECK(!v.empty() && error == std::errc() && end == v.data() + v.size() && v[0] != '-', printable(resume),
              ": bad training setting seed = '", printable(v), "'");
  }
  settings["seed"] = std::to_string(seed);
  run.checkpoint_activations = args.count("checkpoint-activations") > 0 ||
                               (saved.count("checkpoint-activations") && saved.at("checkpoint-activations") == "1");
  settings["checkpoint-activations"] = run.checkpoint_activations ? "1" : "0";
  in_range("batch", batch, 1, kMaxBatch);
  in_range("eval-every", eval_every, 1, kMaxSteps);
  in_range("steps", total, 0, kMaxSteps);
  if (resuming) check_budget(run, source("steps"));
  // On --resume the warm-up is the one the run started with: sized by a larger --steps, it began again.
  int64_t started = total;
  if (!resuming || !saved.count("steps") || !io::parse_integer(saved.at("steps"), started)) started = total;
  run.warmup = std::min(warmup_setting, std::max<int64_t>(started, 0));
  in_range("warmup", warmup_setting, 0, kMaxSteps);
  in_range("save-every", save_every, 0, kMaxSteps);
  check_real_settings(run, source, args.count("weight-decay") > 0);
  return run;
}

}  // namespace qkv::cli
