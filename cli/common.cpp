// The helpers every command shares (common.h).
#include "common.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bounds.h"
#include "distributed/dist.h"
#include "gpt2_folder.h"
#include "io/metadata.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/gpt2_files.h"

namespace qkv::cli {

// Starts the OpenMP pool's threads with SIGINT, SIGTERM and SIGHUP blocked (a thread inherits its creator's
// mask), so an interrupt's handler runs on the main thread, never beside it while it goes on writing files.
void start_pool_without_signals() {
  sigset_t held, before;
  sigemptyset(&held);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&held, sig);
  pthread_sigmask(SIG_BLOCK, &held, &before);
#pragma omp parallel
  { (void)omp_get_thread_num(); }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

int set_thread_count(int64_t n) {
  check_threads(n);
  // Ranks on one machine share its idle cores (they all look at once).
  const int asked = n > 0 ? static_cast<int>(n) : std::max(1, idle_threads() / dist::local_size());
  check_thread_buffers(asked);
  warn_past_cores(asked);
  const int threads = set_num_threads(asked);
  start_pool_without_signals();
  if (dist::rank() == 0 && threads < asked)
    std::fprintf(stderr,
                 "qkv: note: %d threads asked, but the OpenMP runtime here gives at most %d (OMP_THREAD_LIMIT): %d\n",
                 asked, threads, threads);
  return threads;
}

int set_threads_option(const cxxopts::ParseResult& args) {
  const std::string text = args.count("threads") ? args["threads"].as<std::string>() : "0";
  int64_t n = 0;
  // A whole number in decimal: "0x1" was once taken as 1.
  QKV_CHECK(io::parse_integer(text, n), "--threads: '", printable(text), "' is not a whole number");
  return set_thread_count(n);
}

Device set_device_option(const std::string& name) {
  Device device = Device::parse(name);
  // A build without CUDA, no GPU, or no such GPU: each its own one-line error, before any work.
  if (!device.is_cpu()) device_backend(device);
  QKV_CHECK(device.is_cpu() || dist::world_size() == 1, "--device ", device.str(),
            ": under mpirun the ranks train on the CPU (data parallel on GPUs is not built yet)");
  return device;
}

void progress_line(const std::string& line) {
  static const bool tty = isatty(fileno(stderr)) && dist::rank() == 0;
  if (!tty) return;
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

// Parses argv; prints help and returns false when --help was asked.
namespace {
// Whether a command takes --checkpoint.
bool takes_checkpoint(const cxxopts::Options& options) {
  for (const std::string& group : options.groups())
    for (const auto& option : options.group_help(group).options)
      if (option.l.front() == "checkpoint") return true;
  return false;
}
}  // namespace

bool parse(cxxopts::Options& options, int argc, char** argv, cxxopts::ParseResult& args) {
  options.add_options()("h,help", "show this help");
  // Every command that reads a checkpoint takes it first, as a plain argument too: qkv eval x.safetensors.
  const bool checkpoint = takes_checkpoint(options);
  if (checkpoint) options.parse_positional({"checkpoint"});
  args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return false;
  }
  // A second file name (qkv eval a b, or --checkpoint a b) is a second checkpoint, not a stray word.
  QKV_CHECK(
      !checkpoint || args.count("checkpoint") <= 1 || (args.count("checkpoint") == 1 && !args.unmatched().empty()),
      "one checkpoint at a time: give it as the first argument or as --checkpoint FILE, not both");
  QKV_CHECK(!checkpoint || !args.count("checkpoint") || args.unmatched().empty(), "one checkpoint at a time, got '",
            printable(args.unmatched().empty() ? "" : args.unmatched()[0]), "' after it");
  QKV_CHECK(args.unmatched().empty(), "unexpected argument '", printable(args.unmatched()[0]),
            "' (flags start with --)");
  stop_if_parse_only();
  return true;
}

void stop_if_parse_only() {
  if (std::getenv("QKV_PARSE_ONLY")) throw ParsedOnly{};
}

std::string fresh_stem(const std::string& base, const std::vector<std::string>& endings, const char* flag) {
  for (int i = 1; i < 10000; ++i) {
    std::string stem = i == 1 ? base : cat(base, "-", i);
    std::error_code ec;
    if (std::none_of(endings.begin(), endings.end(), [&](const std::string& ending) {
          return std::filesystem::exists(std::filesystem::symlink_status(stem + ending, ec));
        }))
      return stem;
  }
  throw Error(cat("no free name ", base, "-N", endings.front(), ": give one with ", flag, " FILE"));
}

std::string fresh_name(const std::string& base, const std::string& ending, const char* flag) {
  return fresh_stem(base, {ending}, flag) + ending;
}

std::string log_beside(const std::string& checkpoint, const std::map<std::string, std::string>& metadata,
                       std::string& why) {
  auto it = metadata.find("qkv.log");
  if (it == metadata.end()) {
    why = "the checkpoint records no --log";
    return "";
  }
  const std::string& name = it->second;
  const std::filesystem::path beside = std::filesystem::path(checkpoint).parent_path() / name;
  std::error_code ec;
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
      !std::filesystem::is_regular_file(std::filesystem::symlink_status(beside, ec))) {
    why = cat("the run's log ", printable(name), " is not beside the checkpoint");
    return "";
  }
  return beside.string();
}

void use_digits_data(Runner& runner, const cxxopts::ParseResult& args, const std::string& path) {
  if (!args.count("data")) return;
  QKV_CHECK(runner.task().row().prompt_picks_data, "--data is for ",
            task_names([](const TaskRow& t) { return t.prompt_picks_data; }), " models (a held-out image's number); ",
            printable(path), " is ", with_article(runner.spec().task), " model");
  runner.use_data(args["data"].as<std::string>());
}

void add_part_options(cxxopts::Options& options, const std::string& group) {
  for (const nn::PartChoice& part : nn::part_choices()) {  // --norm, --mlp, ...: one row each in nn/parts.cpp
    const std::string fallback = part.get(nn::BlockParts{});
    options.add_options(group)(
        part.key, cat(part.what, ": ", part.choices(), " (default ", fallback.empty() ? "--heads" : fallback, ")"),
        cxxopts::value<std::string>(), part.value);
  }
}

nn::BlockParts part_flags(const cxxopts::ParseResult& args, bool fresh_model) {
  nn::BlockParts parts;
  for (const nn::PartChoice& part : nn::part_choices())
    if (args.count(part.key)) {
      QKV_CHECK(fresh_model, "--", part.key, " builds a fresh model's blocks: it goes with --model (not mha)");
      try {
        part.set(parts, args[part.key].as<std::string>());  // "unknown norm 'x' (layernorm, rmsnorm)"
      } catch (const Error& e) {
        throw Error(cat("--", part.key, ": ", e.what()));
      }
    }
  return parts;
}

nn::AttentionKind attention_flag(const std::string& text) {
  try {
    return nn::AttentionKind::parse(text);
  } catch (const Error& e) {
    throw Error(cat("--attention: ", e.what()));
  }
}

std::string required(const cxxopts::ParseResult& args, const char* name) {
  QKV_CHECK(args.count(name) || std::string(name) != "checkpoint",
            "give the checkpoint file, as the first argument or as --checkpoint FILE");
  QKV_CHECK(args.count(name), "--", name, " is required");
  QKV_CHECK(!args[name].as<std::string>().empty(), "--", name, " is empty");
  return args[name].as<std::string>();
}

// A checkpoint's model, parameters loaded (optimizer state ignored).
std::unique_ptr<Runner> load_runner(const std::string& path, std::map<std::string, std::string>* metadata) {
  // Another framework's GPT-2 (a Hugging Face folder, or llm.c's gpt2_124M.bin): no qkv metadata.
  if (const bool folder = nn::is_gpt2_folder(path); folder || nn::is_llmc_checkpoint(path)) {
    if (metadata) metadata->clear();
    return folder ? load_gpt2_folder(path) : load_llmc_file(path);
  }
  io::TensorFile file = io::load_safetensors(path, {"optimizer."});  // the state a resumed run needs: not read here
  if (metadata) *metadata = file.metadata;
  ModelSpec spec = ModelSpec::from_metadata(file.metadata, path);
  spec.check_tensors(file, path);  // before anything is allocated for the model
  // Bundled data a prompt picks from (the digits) is small and never a path from the file: read it at once.
  const bool read_data = task_row(spec.task).prompt_picks_data && spec.data.empty();
  auto runner = std::make_unique<Runner>(spec, nullptr, read_data);
  nn::load_into(runner->module(), file, path, {"optimizer."});
  runner->module().eval();
  return runner;
}

void use_data_flag(Runner& runner, const cxxopts::ParseResult& args, const std::string& path) {
  const TaskRow& row = runner.task().row();
  if (row.data_is) {
    QKV_CHECK(args.count("data") || runner.spec().data.empty(), printable(path), " was trained on '",
              printable(runner.spec().data), "': give that ", row.data_noun, " (or another) with --data FILE");
    // A model whose prompts pick from its data has read the bundled file already.
    if (args.count("data") || !row.prompt_picks_data)
      runner.use_data(args.count("data") ? args["data"].as<std::string>() : "");
  } else {
    QKV_CHECK(!args.count("data"), "--data is for ",
              task_names([](const TaskRow& t) { return t.data_is != nullptr; }, " and "), " models; ", printable(path),
              " is ", with_article(row.name), " model");
  }
}

Tensor input_loss(Runner& runner, const std::string& text, std::string* what) {
  return runner.task().example_loss(runner, runner.task().prompt_example(text, what));
}

}  // namespace qkv::cli
