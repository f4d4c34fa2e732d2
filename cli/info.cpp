// qkv info: what a checkpoint holds (model, task, settings, step, sizes),
// read and validated without building the model; --system: this machine's
// CPU, the kernels qkv and OpenBLAS run on it, threads and CUDA devices.
#include <cstdio>
#include <fstream>
#include <thread>

#include <cxxopts.hpp>

#include "autograd/cpu.h"
#include "bounds.h"
#include "commands.h"
#include "common.h"
#include "gpt2_folder.h"
#include "io/metadata.h"
#include "kinds.h"
#include "model_spec.h"
#include "nn/gpt2_files.h"
#include "runner.h"

namespace qkv::cli {

namespace {
// The CPU's marketing name, from /proc/cpuinfo ("unknown" elsewhere).
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  for (int i = 0; i < 200 && std::getline(in, line); ++i)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return printable(line.substr(line.find(':') + 2), 80);
  return "unknown";
}
// "not in this build", "no device visible", or one line per device.
std::string describe_cuda() {
  if (!cuda_built()) return "not in this build (the CUDA toolkit was not found, or QKV_CUDA=OFF)";
  int count = cuda_device_count();
  if (count == 0) return cat("built in; no CUDA device visible (", cuda_count_error(), ")");
  std::string out;
  for (int i = 0; i < count; ++i)
    out += cat(i ? "\n             " : "", "cuda:", i, " ", device_backend(Device::cuda(i)).describe(i));
  return out;
}

// --system: this machine's CPU, kernels, devices and data, and the parts a model can be built of.
void print_system() {
  std::printf("system\n  cpu        %s, %u cores (%d thread%s by default)\n  kernels    %s\n", cpu_model_name().c_str(),
              std::thread::hardware_concurrency(), get_num_threads(), get_num_threads() == 1 ? "" : "s",
              cpu::describe_kernels().c_str());
  if (std::string w = cpu::blas_warning(); !w.empty()) std::printf("  warning    %s\n", w.c_str());
  std::printf("  cuda       %s\n  data       %s (the bundled text and digits)\n", describe_cuda().c_str(),
              printable(data_dir()).c_str());
  const std::vector<std::string> parts = nn::describe_parts();  // --plugin's too
  for (size_t i = 0; i < parts.size(); ++i) std::printf("  %-10s %s\n", i == 0 ? "parts" : "", parts[i].c_str());
}

}  // namespace

int info(int argc, char** argv) {
  cxxopts::Options options("qkv info", "What a checkpoint holds: model, task, training settings, step, parameters.");
  options.add_options()("checkpoint", "checkpoint file", cxxopts::value<std::string>(), "FILE")(
      "system",
      "this machine instead (or as well): CPU, the kernels qkv and OpenBLAS run on it, threads, CUDA devices");
  options.parse_positional({"checkpoint"});
  options.positional_help("FILE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  if (args.count("system")) {
    print_system();
    if (!args.count("checkpoint")) return 0;
  }
  QKV_CHECK(args.count("checkpoint") && !args["checkpoint"].as<std::string>().empty(),
            "give the checkpoint file: qkv info FILE (or qkv info --system: this machine)");
  std::string path = args["checkpoint"].as<std::string>();
  if (nn::is_gpt2_folder(path)) {
    print_gpt2_folder_info(path);
    return 0;
  }
  if (nn::is_llmc_checkpoint(path)) {
    print_llmc_info(path);
    return 0;
  }
  io::TensorFile file = io::load_safetensors(path);
  ModelSpec spec = ModelSpec::from_metadata(file.metadata, path);
  spec.check_tensors(file, path);                                  // the model is described, never built
  const bool has_settings = file.metadata.count("qkv.train") > 0;  // read before anything is printed
  const auto settings_read =
      has_settings ? io::metadata_object(file.metadata, "qkv.train", path) : std::map<std::string, std::string>{};
  auto meta = [&](const char* key) {
    return file.metadata.count(key) ? printable(file.metadata.at(key)) : std::string("-");
  };
  // Checked as eval, sample and --resume check it, the model never built and its data never read: what
  // they refuse, info refuses too, and what it shows is what they use (a ViT reads its patches and [CLS]
  // whatever context a file recorded: qkv before 2026-11-25 took any --context).
  const std::unique_ptr<Task> task = resolve_spec(spec, /*read_data=*/false);
  const KindRow& kind = kind_row(spec.model);
  const int64_t context = spec.context;
  if (file.metadata.count("qkv.step")) {
    int64_t step = 0;
    const std::string& text = file.metadata.at("qkv.step");
    QKV_CHECK(io::parse_integer(text, step) && step >= 0 && step <= kMaxSteps, printable(path), ": bad training step '",
              printable(text), "' in its metadata (a step count in ", range(0, kMaxSteps), ")");
  }
  std::printf("%s\n", printable(path).c_str());
  std::printf(
      "  model      %s, %lld parameters: width %lld, %lld layers%s, %lld heads, context %lld, vocab %lld, %s "
      "attention%s%s, dropout %g\n",
      spec.model.c_str(), static_cast<long long>(spec.parameter_count()), static_cast<long long>(spec.width),
      static_cast<long long>(spec.layers), kind.layers_are, static_cast<long long>(spec.heads),
      static_cast<long long>(context), static_cast<long long>(spec.vocab), spec.attention.c_str(),
      spec.post_ln ? ", post-LN" : "", spec.parts.str().empty() ? "" : (", " + spec.parts.str()).c_str(), spec.dropout);
  std::printf("  task       %s\n", task->describe(spec).c_str());
  std::printf("  step       %s\n  optimizer  %s %s\n", meta("qkv.step").c_str(), meta("qkv.optimizer").c_str(),
              meta("qkv.optimizer.hyperparameters").c_str());
  if (has_settings) {
    std::string settings;
    // As the flags that give them: a switch appears only when on (train takes no value for it).
    for (const auto& [k, v] : settings_read) {
      if (k == "checkpoint-activations" && v == "0") continue;
      settings += (settings.empty() ? "" : " ") +
                  ("--" + printable(k) + (k == "checkpoint-activations" ? "" : " " + printable(v)));
    }
    std::printf("  settings   %s\n", settings.c_str());
  } else {
    std::printf("  settings   not recorded (a checkpoint from before qkv.train)\n");
  }
  int64_t tensors = 0, bytes = 0;
  for (const auto& [name, t] : file.tensors)
    ++tensors, bytes += t.numel() * static_cast<int64_t>(element_size(t.dtype()));
  std::printf("  file       %lld tensors, %.2f MB of data (parameters and optimizer state)\n",
              static_cast<long long>(tensors), bytes / 1e6);
  return 0;
}

}  // namespace qkv::cli
