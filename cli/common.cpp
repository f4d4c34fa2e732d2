// The helpers every command shares (common.h).
#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "bounds.h"
#include "distributed/dist.h"
#include "io/safetensors.h"
#include "nn/checkpoint.h"

namespace qkv::cli {

void set_threads_option(int n) {
  check_threads(n);
  // Ranks on one machine share its idle cores (they all look at once).
  int threads = n > 0 ? n : std::max(1, idle_threads() / dist::local_size());
  check_thread_buffers(threads);
  set_num_threads(threads);
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
bool parse(cxxopts::Options& options, int argc, char** argv, cxxopts::ParseResult& args) {
  options.add_options()("h,help", "show this help");
  args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return false;
  }
  QKV_CHECK(args.unmatched().empty(), "unexpected argument '", printable(args.unmatched()[0]),
            "' (flags start with --)");
  return true;
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
            printable(path), " is a ", runner.spec().task, " model");
  runner.use_data(args["data"].as<std::string>());
}

nn::AttentionKind attention_flag(const std::string& text) {
  try {
    return nn::AttentionKind::parse(text);
  } catch (const Error& e) {
    throw Error(cat("--attention: ", e.what()));
  }
}

std::string required(const cxxopts::ParseResult& args, const char* name) {
  QKV_CHECK(args.count(name), "--", name, " is required");
  QKV_CHECK(!args[name].as<std::string>().empty(), "--", name, " is empty");
  return args[name].as<std::string>();
}

// A checkpoint's model, parameters loaded (optimizer state ignored).
std::unique_ptr<Runner> load_runner(const std::string& path, std::map<std::string, std::string>* metadata) {
  io::TensorFile file = io::load_safetensors(path);
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
              " is a ", row.name, " model");
  }
}

Tensor input_loss(Runner& runner, const std::string& text, std::string* what) {
  return runner.task().example_loss(runner, runner.task().prompt_example(text, what));
}

}  // namespace qkv::cli
