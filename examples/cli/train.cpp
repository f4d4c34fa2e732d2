// qkv train: the training loop with evaluation, progress, logs, checkpoints
// (periodic, final, and on Ctrl-C) and optional gradient checks.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>

#include <cxxopts.hpp>

#include "commands.h"
#include "dist/dist.h"
#include "optim/optim.h"
#include "runner.h"

namespace qkv::cli {

namespace {

volatile std::sig_atomic_t interrupted = 0;
void on_interrupt(int) { interrupted = 1; }

// Answer and EOS positions: the tokens an example's loss averages over.
int64_t loss_tokens(const std::vector<Example>& examples, int64_t first, int64_t count) {
  int64_t n = 0;
  for (int64_t i = first; i < first + count; ++i) n += static_cast<int64_t>(examples[i].answer.size()) + 1;
  return n;
}

std::string duration(double seconds) {
  char text[32];
  if (seconds < 60) std::snprintf(text, sizeof text, "%.0fs", seconds);
  else std::snprintf(text, sizeof text, "%dm%02ds", static_cast<int>(seconds / 60), static_cast<int>(seconds) % 60);
  return text;
}

// A float64 copy of the model checked on a small batch, dropout replayed.
bool check_gradients(Runner& runner, Generator& data, const char* when) {
  Runner copy(runner.spec());
  copy.module().to(DType::Float64);
  auto target = copy.module().named_parameters();
  auto source = runner.module().named_parameters();
  for (size_t i = 0; i < target.size(); ++i) target[i].second.assign_(source[i].second.to(DType::Float64));
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

}  // namespace

int train(int argc, char** argv) {
  cxxopts::Options options("qkv train", "Train a model on a task and save a checkpoint.");
  options.add_options()
    ("task", "copy | reverse | sort | add | text", cxxopts::value<std::string>()->default_value("reverse"))
    ("data", "text file for --task text (default: the bundled text)", cxxopts::value<std::string>()->default_value(""))
    ("model", "gpt | seq2seq", cxxopts::value<std::string>()->default_value("gpt"))
    ("max-len", "longest input for copy/reverse/sort", cxxopts::value<int64_t>()->default_value("8"))
    ("digits", "operand digits for add", cxxopts::value<int64_t>()->default_value("3"))
    ("layers", "transformer layers (per side for seq2seq)", cxxopts::value<int64_t>()->default_value("2"))
    ("heads", "attention heads", cxxopts::value<int64_t>()->default_value("4"))
    ("dim", "model width", cxxopts::value<int64_t>()->default_value("64"))
    ("attention", "full | window:W (each token sees W before it; O(n·W)) | linear (O(n), no weight matrix)",
     cxxopts::value<std::string>()->default_value("full"))
    ("context", "context length (default: what the task needs; 64 for text)", cxxopts::value<int64_t>()->default_value("0"))
    ("batch", "examples per step (default 64; 32 for text); under mpirun the global batch, split into contiguous "
              "slices, one per rank", cxxopts::value<int64_t>()->default_value("64"))
    ("steps", "step budget, counting resumed steps (default 4000; 800 for text)", cxxopts::value<int64_t>()->default_value("4000"))
    ("lr", "peak learning rate (default 0.001; 0.003 for text)", cxxopts::value<double>()->default_value("0.001"))
    ("optimizer", "adamw | adam | sgd", cxxopts::value<std::string>()->default_value("adamw"))
    ("schedule", "constant | cosine", cxxopts::value<std::string>()->default_value("cosine"))
    ("warmup", "warm-up steps", cxxopts::value<int64_t>()->default_value("100"))
    ("weight-decay", "weight decay", cxxopts::value<double>()->default_value("0.01"))
    ("clip", "gradient norm limit (0: off)", cxxopts::value<double>()->default_value("1.0"))
    ("dropout", "dropout probability (default 0; 0.2 for text)", cxxopts::value<double>()->default_value("0"))
    ("seed", "random seed", cxxopts::value<uint64_t>()->default_value("1"))
    ("threads", "threads per process (0: one per idle core, shared among the ranks on this machine)",
     cxxopts::value<int>()->default_value("0"))
    ("eval-every", "steps between evaluations (default 250; 100 for text)", cxxopts::value<int64_t>()->default_value("250"))
    ("target", "stop when held-out exact match reaches this", cxxopts::value<double>()->default_value("0.99"))
    ("save", "checkpoint file (default: <task>.safetensors)", cxxopts::value<std::string>()->default_value(""))
    ("save-every", "also save every N steps (0: only at the end)", cxxopts::value<int64_t>()->default_value("0"))
    ("resume", "continue from a checkpoint", cxxopts::value<std::string>()->default_value(""))
    ("log", "write step, loss, lr, grad norm, tokens/s, eval metrics (.csv, else JSON lines)",
     cxxopts::value<std::string>()->default_value(""))
    ("attn-entropy", "add this x the mean attention entropy (every layer and head) to the loss; < 0 spreads attention",
     cxxopts::value<double>()->default_value("0"))
    ("checkpoint-activations", "keep only each block's input and recompute the block in backward (less memory, more time)")
    ("check-grads", "gradient-check a float64 copy of the model before the first step and at the end")
    ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  // The bundled text is small (28 KB): fewer, smaller steps and dropout keep
  // the held-out loss falling instead of memorising the training part.
  bool text = args["task"].as<std::string>() == "text";
  auto integer = [&](const char* name, int64_t text_default) {
    return text && !args.count(name) ? text_default : args[name].as<int64_t>();
  };
  const int64_t batch = integer("batch", 32), eval_every = integer("eval-every", 100), total = integer("steps", 800);
  const double dropout = text && !args.count("dropout") ? 0.2 : args["dropout"].as<double>();
  QKV_CHECK(batch > 0, "--batch must be positive, got ", batch);
  // Data parallel under mpirun: rank r trains on slice r of every global batch.
  const int ranks = dist::world_size(), me = dist::rank();
  const bool lead = me == 0;  // prints, logs, evaluates and saves
  QKV_CHECK(batch >= ranks, "--batch ", batch, " is the global batch: it needs at least one example for each of the ",
            ranks, " ranks");
  const dist::Slice mine = dist::slice_of(batch, me, ranks);
  QKV_CHECK(eval_every > 0, "--eval-every must be positive, got ", eval_every);
  QKV_CHECK(total >= 0, "--steps must be >= 0, got ", total);
  for (const char* non_negative : {"warmup", "save-every"})
    QKV_CHECK(args[non_negative].as<int64_t>() >= 0, "--", non_negative, " must be >= 0, got ", args[non_negative].as<int64_t>());
  set_threads_option(args["threads"].as<int>());

  ModelSpec spec;
  std::string resume = args["resume"].as<std::string>();
  if (!resume.empty()) {
    spec = ModelSpec::from_metadata(nn::load_safetensors(resume).metadata, resume);
  } else {
    spec.model = args["model"].as<std::string>();
    spec.task = args["task"].as<std::string>();
    spec.data = args["data"].as<std::string>().empty() && spec.task == "text" ? default_text_path() : args["data"].as<std::string>();
    spec.max_len = args["max-len"].as<int64_t>();
    spec.digits = args["digits"].as<int64_t>();
    spec.layers = args["layers"].as<int64_t>();
    spec.heads = args["heads"].as<int64_t>();
    spec.width = args["dim"].as<int64_t>();
    spec.context = args["context"].as<int64_t>();
    spec.dropout = dropout;
    spec.attention = nn::AttentionKind::parse(args["attention"].as<std::string>()).str();
    QKV_CHECK(spec.context >= 0, "--context must be >= 0");
    QKV_CHECK(spec.dropout >= 0 && spec.dropout < 1, "--dropout must be in [0, 1), got ", spec.dropout);
  }
  uint64_t seed = args["seed"].as<uint64_t>();
  manual_seed(seed);
  Runner runner(spec);
  const ModelSpec& s = runner.spec();
  const double entropy_weight = args["attn-entropy"].as<double>();
  QKV_CHECK(std::isfinite(entropy_weight), "--attn-entropy must be finite");
  runner.set_attention_entropy(entropy_weight);
  runner.set_recompute(args.count("checkpoint-activations") > 0);
  Generator data(seed ^ 0x5eedda7aULL);

  // Optimizer and schedule.
  int64_t warmup = std::min(args["warmup"].as<int64_t>(), total);
  // 3e-3 on add stalls at ~10% in some runs (a carry plateau); 1e-3 reached the
  // target in every task and seed tried. Text keeps 3e-3 for its short schedule.
  double lr = text && !args.count("lr") ? 0.003 : args["lr"].as<double>();
  std::string kind = args["optimizer"].as<std::string>(), schedule_kind = args["schedule"].as<std::string>();
  std::unique_ptr<optim::Optimizer> opt;
  auto params = runner.module().named_parameters();
  if (kind == "sgd") {
    opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{lr, 0.9, 0, args["weight-decay"].as<double>(), true});
  } else {
    QKV_CHECK(kind == "adamw" || kind == "adam", "unknown --optimizer '", kind, "' (adamw, adam, sgd)");
    optim::AdamOptions o;
    o.lr = lr, o.weight_decay = args["weight-decay"].as<double>();
    if (kind == "adamw") opt = std::make_unique<optim::AdamW>(params, o);
    else opt = std::make_unique<optim::Adam>(params, o);
  }
  std::unique_ptr<optim::Schedule> schedule;
  if (schedule_kind == "cosine") schedule = std::make_unique<optim::CosineLR>(lr, warmup, std::max(total, warmup), lr * 0.1);
  else if (schedule_kind == "constant") schedule = std::make_unique<optim::ConstantLR>(lr);
  else throw Error(cat("unknown --schedule '", schedule_kind, "' (constant, cosine)"));
  optim::NamedGenerators generators{{"default", &default_generator()}, {"data", &data}};
  if (!resume.empty()) optim::load_training_checkpoint(resume, runner.module(), opt.get(), generators);
  std::vector<Tensor> parameters = runner.module().parameters();
  if (ranks > 1) {
    dist::broadcast(parameters);  // rank 0's, whatever the others built or loaded
    // Dropout draws its own stream on each rank; the data stream stays shared,
    // so every rank draws the same global batch and takes its slice.
    auto state = default_generator().state();
    default_generator().manual_seed(state[0] ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(me)));
  }

  std::string save = args["save"].as<std::string>();
  if (save.empty()) save = s.task + ".safetensors";
  auto save_now = [&] {
    if (lead) optim::save_training_checkpoint(save, runner.module(), opt.get(), generators, s.metadata());
  };
  int64_t save_every = args["save-every"].as<int64_t>();
  double clip = args["clip"].as<double>(), target = args["target"].as<double>();

  if (lead)
    std::printf("qkv train: %s on %s, %lld parameters (width %lld, %lld layers, %lld heads, context %lld), %s, %d threads%s\n",
                s.model.c_str(), s.task == "text" ? ("text " + s.data).c_str() : s.task.c_str(),
                static_cast<long long>(runner.module().num_parameters()), static_cast<long long>(s.width),
                static_cast<long long>(s.layers), static_cast<long long>(s.heads), static_cast<long long>(s.context),
                opt->name().c_str(), get_num_threads(),
                ranks > 1 ? cat(" per rank, ", ranks, " ranks (MPI) of ", batch / ranks, batch % ranks ? "-" + std::to_string(batch / ranks + 1) : "",
                                " examples each").c_str() : "");
  bool grads_ok = true;
  if (lead && args.count("check-grads")) grads_ok = check_gradients(runner, data, "before training") && grads_ok;

  std::string log_path = args["log"].as<std::string>();
  std::ofstream log;
  bool csv = log_path.size() >= 4 && log_path.compare(log_path.size() - 4, 4, ".csv") == 0;
  if (lead && !log_path.empty()) {
    log.open(log_path, std::ios::app);
    QKV_CHECK(static_cast<bool>(log), "cannot write --log file '", log_path, "'");
    if (csv && log.tellp() == 0)
      log << "step,loss,lr,grad_norm,tokens_per_s,eval_accuracy,eval_loss" << (entropy_weight != 0 ? ",attn_entropy" : "") << "\n";
  }

  // mpirun gives its ranks a terminal of their own: under it, lines at evaluations only.
  bool tty = lead && !dist::active() && isatty(fileno(stdout));
  // mpirun passes Ctrl-C on to its ranks as SIGTERM.
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  auto started = std::chrono::steady_clock::now();
  int64_t first_step = opt->steps(), tokens = 0;
  double last_metric = -1, smoothed = 0;
  bool reached = false, stop = false;
  while (opt->steps() < total && !stop && !reached) {
    int64_t step = opt->steps();
    opt->set_lr(schedule->lr(step));
    opt->zero_grad();
    Tensor loss;
    int64_t step_tokens;
    // This rank's share of the global batch's loss: its slice's mean, times
    // its share of the loss tokens, times the rank count, so that the mean
    // over ranks of the gradients is the gradient of the global batch's mean.
    double share = 1;
    if (runner.task()) {
      std::vector<Example> examples;  // the whole global batch, so that the data stream is the same on every rank
      step_tokens = 0;
      for (int64_t b = 0; b < batch; ++b) {
        examples.push_back(runner.task()->sample(data));
        step_tokens += static_cast<int64_t>(examples.back().input.size() + examples.back().answer.size() + 2);
      }
      if (ranks > 1) {
        share = static_cast<double>(loss_tokens(examples, mine.first, mine.count)) / loss_tokens(examples, 0, batch);
        examples = std::vector<Example>(examples.begin() + mine.first, examples.begin() + mine.first + mine.count);
      }
      loss = runner.loss(examples);
    } else {
      loss = runner.text_loss("train", batch, data, mine.first, mine.count);
      share = static_cast<double>(mine.count) / static_cast<double>(batch);
      step_tokens = batch * s.context;
    }
    if (ranks > 1) {
      (loss * (share * ranks)).backward();
      dist::average_gradients(parameters);
    } else {
      loss.backward();
    }
    double norm = clip > 0 ? optim::clip_grad_norm(opt->params(), clip) : 0.0;
    opt->step();
    tokens += step_tokens;
    // One all-reduce agrees on the global loss and on stopping: a signal
    // reaches the ranks at different moments, and all must stop at one step.
    std::vector<double> shared{loss.item() * share, interrupted ? 1.0 : 0.0};
    dist::sum(shared);
    double value = shared[0];
    stop = shared[1] > 0;
    smoothed = step == first_step ? value : 0.95 * smoothed + 0.05 * value;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    double rate = tokens / std::max(elapsed, 1e-9);
    int64_t done = opt->steps();
    double eta = elapsed / static_cast<double>(done - first_step) * static_cast<double>(total - done);

    bool evaluate = done % eval_every == 0 || done == total;
    std::string metric;
    if (evaluate && ranks > 1) {
      // Cheap insurance that data parallelism works: every rank's parameters, bit for bit.
      QKV_CHECK(dist::same_on_all_ranks(dist::parameter_hash(parameters)), "the ranks' parameters differ after step ",
                done, ": the ranks no longer train the same model (a rank's arithmetic or data differs)");
    }
    if (evaluate && lead) {
      Generator held_out(seed ^ 0x4e1d0e7ULL);  // the same held-out examples at every evaluation
      if (runner.task()) {
        last_metric = runner.accuracy(500, held_out);
        metric = cat("held-out exact match ", std::to_string(100 * last_metric).substr(0, 5), "%");
        reached = last_metric >= target;
      } else {
        last_metric = runner.held_out_loss(64, held_out);
        char text[64];
        std::snprintf(text, sizeof text, "held-out loss %.3f (%.3f bits/byte)", last_metric, last_metric / std::log(2.0));
        metric = text;
      }
    }
    if (evaluate && ranks > 1) reached = dist::broadcast_value(reached) != 0;  // rank 0 evaluated
    if (log.is_open()) {
      std::string acc = evaluate && runner.task() ? std::to_string(last_metric) : "";
      std::string held = evaluate && !runner.task() ? std::to_string(last_metric) : "";
      // the loss includes the entropy term; the term itself is logged apart
      std::string entropy = entropy_weight != 0 ? std::to_string(runner.last_entropy()) : "";
      if (csv)
        log << done << "," << value << "," << opt->lr() << "," << norm << "," << rate << "," << acc << "," << held
            << (entropy.empty() ? "" : "," + entropy) << "\n";
      else log << "{\"step\":" << done << ",\"loss\":" << value << ",\"lr\":" << opt->lr() << ",\"grad_norm\":" << norm
               << ",\"tokens_per_s\":" << rate << (acc.empty() ? "" : ",\"eval_accuracy\":" + acc)
               << (held.empty() ? "" : ",\"eval_loss\":" + held) << (entropy.empty() ? "" : ",\"attn_entropy\":" + entropy)
               << "}\n";
    }
    char line[256];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  %s elapsed  ETA %s",
                  static_cast<long long>(done), static_cast<long long>(total), smoothed, opt->lr(), rate,
                  duration(elapsed).c_str(), duration(eta).c_str());
    if (tty) std::printf("\r\033[K%s", line);
    if (evaluate && lead) std::printf(tty ? "\r\033[K%s  %s\n" : "%s  %s\n", line, metric.c_str());
    std::fflush(stdout);
    if (save_every > 0 && done % save_every == 0) save_now();
  }
  if (tty) std::printf("\n");
  save_now();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (stop) {
    if (lead) std::printf("interrupted at step %lld: saved %s\n", static_cast<long long>(opt->steps()), save.c_str());
    return 130;
  }
  if (lead && args.count("check-grads")) grads_ok = check_gradients(runner, data, "after training") && grads_ok;
  if (lead) std::printf("%s after %lld steps in %s: saved %s\n", reached ? "reached the target" : "finished",
              static_cast<long long>(opt->steps()), duration(elapsed).c_str(), save.c_str());
  return grads_ok ? 0 : 1;
}

}  // namespace qkv::cli
