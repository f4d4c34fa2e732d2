#include "gpt2_folder.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "bounds.h"
#include "bpe.h"
#include "io/folder.h"
#include "nn/gpt2_files.h"

namespace qkv::cli {

namespace {

// A GPT-2 of `config` as the program drives it: the gpt kind reading the text task in a tokenizer's tokens.
ModelSpec gpt2_spec(const nn::GPTConfig& config, std::map<std::string, std::string> tokenizer_files,
                    const std::string& tokenizer, const std::string& source) {
  ModelSpec spec;
  spec.model = "gpt";
  spec.task = "text";
  spec.vocab = config.vocab;
  spec.context = config.context;
  spec.width = config.width;
  spec.heads = config.heads;
  spec.layers = config.layers;
  spec.tokenizer_files = std::move(tokenizer_files);
  spec.tokenizer = tokenizer;
  spec.source = source;
  return spec;
}

// A model this machine cannot hold is refused before its weights are read; `named` is the file that gives its
// size; `in_flight` the bytes read and converted beside the model at once.
void check_loadable(const ModelSpec& spec, const std::string& named, double in_flight) {
  check_fits_in_memory(4.0 * static_cast<double>(spec.parameter_count()) + in_flight,
                       cat(printable(named), ": a GPT-2 of ", spec.parameter_count(), " parameters"),
                       "load it on a machine with more memory");
}

std::string megabytes(uintmax_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

// info's lines for a GPT-2 read from another framework's files; `file` says what the files are.
void print_gpt2_info(const std::string& path, ModelSpec spec, const std::string& file) {
  const std::unique_ptr<Task> task = resolve_spec(spec, /*read_data=*/false);  // reads the tokenizer, as loading does
  std::printf("%s\n", printable(path).c_str());
  std::printf(
      "  model      gpt (GPT-2), %lld parameters: width %lld, %lld layers, %lld heads, context %lld, vocab %lld\n",
      static_cast<long long>(spec.parameter_count()), static_cast<long long>(spec.width),
      static_cast<long long>(spec.layers), static_cast<long long>(spec.heads), static_cast<long long>(spec.context),
      static_cast<long long>(spec.vocab));
  std::printf("  task       %s\n", task->describe(spec).c_str());
  std::printf("  file       %s\n", file.c_str());
}

}  // namespace

ModelSpec gpt2_folder_spec(const std::string& folder) {
  // The user named the folder: its files are read, with the folder's rules (io/folder.h). config.json first (a
  // folder without one is no checkpoint), then the tokenizer: two statements, as arguments' order is unspecified.
  const nn::GPTConfig config = nn::read_gpt2_config(folder);
  return gpt2_spec(config, BpeTokenizer::read_folder(folder), folder, folder);
}

std::unique_ptr<Runner> load_gpt2_folder(const std::string& folder) {
  ModelSpec spec = gpt2_folder_spec(folder);
  // Named by its config.json, which gives the size; wte is read and converted beside the model.
  check_loadable(spec, io::file_in_folder(folder, "config.json", "GPT-2 folder"),
                 8.0 * static_cast<double>(spec.vocab) * static_cast<double>(spec.width));
  auto runner = std::make_unique<Runner>(spec, nn::load_gpt2(folder, nn::gpt_config(spec)), /*read_data=*/false);
  runner->module().eval();
  return runner;
}

void print_gpt2_folder_info(const std::string& folder) {
  ModelSpec spec = gpt2_folder_spec(folder);
  const std::string weights = nn::gpt2_weights_file(folder);
  const std::vector<io::TensorEntry> entries = io::read_safetensors_header(weights);
  std::set<std::string> dtypes;
  for (const io::TensorEntry& e : entries) dtypes.insert(e.dtype);
  std::string stored;
  for (const std::string& d : dtypes) stored += (stored.empty() ? "" : ", ") + d;
  print_gpt2_info(folder, spec,
                  cat("a Hugging Face GPT-2 folder: model.safetensors holds ", entries.size(), " tensors (", stored,
                      "), ", megabytes(std::filesystem::file_size(weights))));
}

ModelSpec llmc_spec(const std::string& path) {
  const nn::GPTConfig config = nn::read_llmc_config(path);
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  std::map<std::string, std::string> files;
  try {
    files = BpeTokenizer::read_folder(folder.string());
  } catch (const Error& e) {
    throw Error(cat(printable(path),
                    ": an llm.c checkpoint reads GPT-2's tokens: put GPT-2's vocab.json and "
                    "merges.txt (or tokenizer.json) beside it (",
                    e.what(), ")"));
  }
  return gpt2_spec(config, std::move(files), folder.string(), path);
}

std::unique_ptr<Runner> load_llmc_file(const std::string& path) {
  ModelSpec spec = llmc_spec(path);
  check_loadable(spec, path, 0);
  auto runner = std::make_unique<Runner>(spec, nn::load_llmc(path), /*read_data=*/false);
  runner->module().eval();
  return runner;
}

void print_llmc_info(const std::string& path) {
  print_gpt2_info(path, llmc_spec(path),
                  cat("an llm.c GPT-2 checkpoint, ", megabytes(std::filesystem::file_size(path))));
}

}  // namespace qkv::cli
