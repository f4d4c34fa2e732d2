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
#include "common.h"
#include "distributed/dist.h"
#include "io/metadata.h"
#include "io/output.h"
#include "nn/gpt2_files.h"
#include "nn/plugin.h"
#include "optim/optim.h"
#include "runner.h"
#include "train/trainer.h"
#include "train_flags.h"
#include "train_outputs.h"

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
    io::remove_temporaries_now();  // a save cut short leaves no temporary beside its checkpoint
    static const char kMessage[] = "\nqkv train: second signal: exiting without saving\n";
    ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    (void)ignored;
    _exit(130);
  }
  if (!interrupted) first_signal_s = static_cast<std::sig_atomic_t>(now.tv_sec);
  interrupted = 1;
  train::Trainer::request_stop();  // async-signal-safe: the ranks agree on it at the step's end
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
  GradcheckResult r = gradcheck_leaves(copy.task().fixed_batch_loss(copy, 2, data), target, options);
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

void print_banner(const Runner& runner, const Run& run, const optim::Optimizer& opt, int64_t params) {
  const ModelSpec& s = runner.spec();
  const int ranks = dist::world_size();
  std::printf(
      "qkv train: %s on %s, %lld parameters (width %lld, %lld layers, %lld heads, context %lld%s), %s, %d "
      "thread%s%s\n",
      s.model.c_str(), runner.task().title(s).c_str(), static_cast<long long>(params), static_cast<long long>(s.width),
      static_cast<long long>(s.layers), static_cast<long long>(s.heads), static_cast<long long>(s.context),
      s.parts.str().empty() ? "" : (", " + s.parts.str()).c_str(), opt.name().c_str(), get_num_threads(),
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

// Under mpirun: every rank starts from rank 0's weights, at the same step.
void share_start(Runner& runner, const optim::Optimizer& opt, int me) {
  // Each rank read its own copy of --resume: the same flags, but maybe not the same file.
  // Different steps would make the ranks run different numbers of steps and hang in a collective.
  QKV_CHECK(dist::same_on_all_ranks(static_cast<uint64_t>(opt.steps())),
            "the ranks resumed from different checkpoints (their steps differ): give every rank the same file");
  std::vector<Tensor> parameters = runner.module().parameters();
  dist::broadcast(parameters);  // rank 0's, whatever the others built or loaded
  // Dropout draws its own stream on each rank; the data stream stays shared,
  // so every rank draws the same global batch and takes its slice.
  auto state = default_generator().state();
  default_generator().manual_seed(state[0] ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(me)));
}

// A word as a shell reads it back: plain when it is plain, else in single quotes.
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_+=.,/:@%-", c);
  });
  if (plain) return text;
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// --steps on --resume is the run's whole budget, as it was when the run began: a cosine schedule then
// ends at the new budget, so the rate changes from the resumed step on. Said, with the figures.
void say_new_budget(const Run& run, int64_t step) {
  if (run.budget_before < 0 || run.budget_before == run.total || run.schedule != "cosine") return;
  const optim::CosineLR before(run.lr, run.warmup, std::max(run.budget_before, run.warmup), run.lr * 0.1);
  const std::unique_ptr<optim::Schedule> now = make_schedule(run);
  std::printf(
      "note: --steps %lld changes this run's budget from %lld steps: its cosine schedule now ends at step %lld "
      "(the rate at step %lld is %.3g, was %.3g)\n",
      static_cast<long long>(run.total), static_cast<long long>(run.budget_before), static_cast<long long>(run.total),
      static_cast<long long>(step + 1), now->lr(step), before.lr(step));
}

// The run in brief: where its work is, how good it got, and what to run next.
void report(const train::Outcome& out, const Runner& runner, const RunOutputs& outputs, const BestModel& best,
            uint64_t seed) {
  std::printf("%s after %lld step%s in %s: saved %s%s\n",
              out.reason == train::Outcome::Target ? "reached the target" : "finished",
              static_cast<long long>(out.steps), out.steps == 1 ? "" : "s", train::duration(out.elapsed_s).c_str(),
              printable(outputs.save).c_str(), best.kept() ? " (the last step's model)" : "");
  const char* metric = runner.task().metric_name();
  if (best.kept())
    std::printf("best held-out %s %.4f at step %lld (last %.4f): its model is %s\n", metric, best.metric(),
                static_cast<long long>(best.step()), out.last_metric, printable(best.path()).c_str());
  else if (!std::isnan(out.best_metric))
    std::printf("best held-out %s %.4f at step %lld (last %.4f)\n", metric, out.best_metric,
                static_cast<long long>(out.best_step), out.last_metric);
  if (!outputs.log.empty())
    std::printf("log: %s (draw it: qkv plot %s)\n", printable(outputs.log).c_str(), printable(outputs.log).c_str());
  // A held-out example to try the model on.
  Generator gen(seed ^ 0x4e1d0e7ULL);
  std::string plugins;  // the commands that read the checkpoint need the plugins this run loaded
  for (const std::string& p : nn::loaded_plugins()) plugins += " --plugin " + shell_word(printable(p));
  const std::string ckpt = shell_word(printable(outputs.save)) + plugins,
                    prompt = shell_word(runner.task().example_prompt(gen));
  std::printf("next: qkv sample %s --prompt %s\n", ckpt.c_str(), prompt.c_str());
  if (runner.spec().attention != "linear")  // linear attention forms no weights to study
    std::printf("      qkv explore %s --prompt %s   (attention, gradients, curves)\n", ckpt.c_str(), prompt.c_str());
}

// The exit code, once stdout is flushed: a full disk or a closed pipe must not end in exit 0.
int finish(int code) {
  QKV_CHECK(std::fflush(stdout) == 0 && !std::ferror(stdout), "cannot write the output: ", std::strerror(errno));
  return code;
}

// Runs the loop with progress lines: on a terminal one line redrawn in place, and a line per evaluation.
train::Outcome run_with_progress(train::Trainer& trainer, const Run& run, const Task& task, bool lead) {
  // mpirun gives its ranks a terminal of their own: under it, lines at evaluations only.
  const bool tty = lead && !dist::active() && isatty(fileno(stdout));
  trainer.on_step = [&](const train::Progress& p) {
    // A run with a target may stop before its budget, so its ETA is an upper bound (but a label task's
    // held-out score of 1, its default, is rarely reached).
    const bool stops_early = run.target > 0 && (run.target < 1 || task.family() == TaskFamily::Sequence);
    std::string line = train::progress_line(p, stops_early);
    if (tty) std::printf("\r\033[K%s", line.c_str());
    if (p.evaluation) std::printf(tty ? "\r\033[K%s  %s\n" : "%s  %s\n", line.c_str(), p.evaluation->text.c_str());
    std::fflush(stdout);
  };
  train::Outcome out;
  try {
    out = trainer.run();
  } catch (...) {
    if (tty) std::printf("\n");  // the error goes below the progress line, not over it
    std::fflush(stdout);
    throw;
  }
  if (tty) std::printf("\n");
  return out;
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
  stop_if_parse_only();
  check_ranks_agree(options, args);  // before any collective that depends on a flag
  Run run = resolve(args);
  // Data parallel under mpirun: rank r trains on slice r of every global batch.
  const int ranks = dist::world_size(), me = dist::rank();
  const bool lead = me == 0;  // prints, logs, evaluates and saves
  QKV_CHECK(run.batch >= ranks, "--batch ", run.batch,
            " is the global batch: it needs at least one example for each of the ", ranks, " ranks");
  const dist::Slice mine = dist::slice_of(run.batch, me, ranks);
  set_threads_option(args);
  const Device device = set_device_option(args.count("device") ? args["device"].as<std::string>() : "cpu");
  const RunOutputs outputs = check_outputs(args, run);
  BestModel best(outputs.best, run.resuming);
  SaveTarget last_target(outputs.save, args.count("force") > 0, outputs.continuing),
      best_target(outputs.best, args.count("force") > 0, outputs.continuing);

  manual_seed(run.seed);
  // Checked before the model is built: after, a refused --dim 4096 had spent 8 s initialising 800 MB of weights.
  Runner runner(run.spec, nullptr, true, [&](const ModelSpec& spec) { check_training_fits(spec, mine, run); });
  if (!run.init.empty()) nn::load_gpt2_into(dynamic_cast<nn::GPT&>(runner.module()), run.init);  // a fine-tune
  runner.to(device);  // before the optimizer: its state is made where the parameters are
  runner.set_attention_entropy(run.entropy_weight);
  runner.set_checkpoint_activations(run.checkpoint_activations);
  Generator data(run.seed ^ 0x5eedda7aULL);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(run, runner.module().named_parameters());
  std::unique_ptr<optim::Schedule> schedule = make_schedule(run);
  optim::NamedGenerators generators{{"default", &default_generator()}, {"data", &data}};
  if (run.resuming)
    optim::load_training_checkpoint(std::move(run.resumed), run.resume, runner.module(), opt.get(), generators);
  if (ranks > 1) share_start(runner, *opt, me);

  train::Trainer trainer(*opt, *schedule, trainer_options(run, outputs.log, outputs.save, outputs.replace_log));
  trainer.save_name = outputs.save;
  const auto metadata = checkpoint_metadata(runner, trainer.settings(run.settings), outputs.log, outputs.save);
  trainer.set_saved_step(run.resuming ? opt->steps() : -1, run.resume);
  trainer.loss = [&](int64_t) { return runner.task().step_loss(runner, run.batch, data, mine); };
  auto save_to = [&](SaveTarget& target, std::map<std::string, std::string> with) {
    with.insert(metadata.begin(), metadata.end());
    optim::save_training_checkpoint(target.path(), runner.module(), opt.get(), generators, with, target.next());
    target.saved();
  };
  trainer.evaluate = [&](int64_t step) {
    Generator held_out(run.seed ^ 0x4e1d0e7ULL);  // the same examples at every evaluation
    train::Evaluation e = runner.task().evaluate(runner, held_out, run.target);
    best.offer(e, step, [&](const std::map<std::string, std::string>& extra) { save_to(best_target, extra); });
    return e;
  };
  trainer.save = [&] {  // with what the log holds now, so --resume can tell it from another file
    const std::string digest = trainer.log_digest();
    save_to(last_target, digest.empty() ? std::map<std::string, std::string>{}
                                        : std::map<std::string, std::string>{{"qkv.log.digest", digest}});
  };
  trainer.extra_log_value = [&] { return runner.last_entropy(); };  // the loss includes the term; it is logged apart
  if (lead) print_banner(runner, run, *opt, runner.module().num_parameters());
  for (const std::string& note : outputs.notes) std::printf("%s\n", note.c_str());
  if (lead && run.resuming) say_new_budget(run, opt->steps());
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_interrupt);
  bool grads_ok = true;
  if (lead && args.count("check-grads")) grads_ok = check_gradients(runner, data, "before training") && grads_ok;
  const train::Outcome out = run_with_progress(trainer, run, runner.task(), lead);

  if (out.reason == train::Outcome::Stopped) {
    if (lead)
      std::printf("interrupted at step %lld: saved %s (continue with: qkv train --resume %s)\n",
                  static_cast<long long>(out.steps), printable(outputs.save).c_str(), printable(outputs.save).c_str());
    return finish(130);
  }
  if (lead && args.count("check-grads")) grads_ok = check_gradients(runner, data, "after training") && grads_ok;
  if (lead) report(out, runner, outputs, best, run.seed);
  return finish(grads_ok ? 0 : 1);
}

}  // namespace qkv::cli
