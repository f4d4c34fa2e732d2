#include "gpt2_folder.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "bounds.h"
#include "bpe.h"
#include "io/folder.h"
#include "nn/gpt2_files.h"

namespace qkv::cli {

ModelSpec gpt2_folder_spec(const std::string& folder) {
  const nn::GPTConfig config = nn::read_gpt2_config(folder);
  ModelSpec spec;
  spec.model = "gpt";
  spec.task = "text";
  spec.vocab = config.vocab;
  spec.context = config.context;
  spec.width = config.width;
  spec.heads = config.heads;
  spec.layers = config.layers;
  spec.tokenizer = folder;  // the user named it: its files are read, with the folder's rules (io/folder.h)
  spec.tokenizer_files = BpeTokenizer::read_folder(folder);
  spec.source = folder;
  return spec;
}

std::unique_ptr<Runner> load_gpt2_folder(const std::string& folder) {
  ModelSpec spec = gpt2_folder_spec(folder);
  // The model, and the largest tensor on its way in (wte, read and converted): before a byte of the weights.
  const double bytes = 4.0 * static_cast<double>(spec.parameter_count()) +
                       8.0 * static_cast<double>(spec.vocab) * static_cast<double>(spec.width);
  // Named by its config.json, which gives the size.
  check_fits_in_memory(bytes,
                       cat(printable(io::file_in_folder(folder, "config.json", "GPT-2 folder")), ": a GPT-2 of ",
                           spec.parameter_count(), " parameters"),
                       "load it on a machine with more memory");
  const nn::GPTConfig config = nn::gpt_config(spec);
  auto runner = std::make_unique<Runner>(spec, nn::load_gpt2(folder, config), /*read_data=*/false);
  runner->module().eval();
  return runner;
}

void print_gpt2_folder_info(const std::string& folder) {
  ModelSpec spec = gpt2_folder_spec(folder);
  const std::string weights = nn::gpt2_weights_file(folder);
  const std::unique_ptr<Task> task = resolve_spec(spec, /*read_data=*/false);  // reads the tokenizer, as loading does
  std::map<std::string, std::string> metadata;
  const std::vector<io::TensorEntry> entries = io::read_safetensors_header(weights, &metadata);
  std::set<std::string> dtypes;
  for (const io::TensorEntry& e : entries) dtypes.insert(e.dtype);
  std::string stored;
  for (const std::string& d : dtypes) stored += (stored.empty() ? "" : ", ") + d;
  std::printf("%s\n", printable(folder).c_str());
  std::printf(
      "  model      gpt (GPT-2), %lld parameters: width %lld, %lld layers, %lld heads, context %lld, vocab %lld\n",
      static_cast<long long>(spec.parameter_count()), static_cast<long long>(spec.width),
      static_cast<long long>(spec.layers), static_cast<long long>(spec.heads), static_cast<long long>(spec.context),
      static_cast<long long>(spec.vocab));
  std::printf("  task       %s\n", task->describe(spec).c_str());
  std::printf("  file       a Hugging Face GPT-2 folder: model.safetensors holds %zu tensors (%s), %.2f MB\n",
              entries.size(), stored.c_str(), static_cast<double>(std::filesystem::file_size(weights)) / 1e6);
}

ModelSpec llmc_spec(const std::string& path) {
  const nn::GPTConfig config = nn::read_llmc_config(path);
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  ModelSpec spec;
  spec.model = "gpt";
  spec.task = "text";
  spec.vocab = config.vocab;
  spec.context = config.context;
  spec.width = config.width;
  spec.heads = config.heads;
  spec.layers = config.layers;
  try {
    spec.tokenizer_files = BpeTokenizer::read_folder(folder.string());
  } catch (const Error& e) {
    throw Error(cat(printable(path),
                    ": an llm.c checkpoint reads GPT-2's tokens: put GPT-2's vocab.json and "
                    "merges.txt (or tokenizer.json) beside it (",
                    e.what(), ")"));
  }
  spec.tokenizer = folder.string();
  spec.source = path;
  return spec;
}

std::unique_ptr<Runner> load_llmc_file(const std::string& path) {
  ModelSpec spec = llmc_spec(path);
  const double bytes = 4.0 * static_cast<double>(spec.parameter_count());
  check_fits_in_memory(bytes, cat(printable(path), ": a GPT-2 of ", spec.parameter_count(), " parameters"),
                       "load it on a machine with more memory");
  auto runner = std::make_unique<Runner>(spec, nn::load_llmc(path), /*read_data=*/false);
  runner->module().eval();
  return runner;
}

void print_llmc_info(const std::string& path) {
  ModelSpec spec = llmc_spec(path);
  const std::unique_ptr<Task> task = resolve_spec(spec, /*read_data=*/false);
  std::printf("%s\n", printable(path).c_str());
  std::printf(
      "  model      gpt (GPT-2), %lld parameters: width %lld, %lld layers, %lld heads, context %lld, vocab %lld\n",
      static_cast<long long>(spec.parameter_count()), static_cast<long long>(spec.width),
      static_cast<long long>(spec.layers), static_cast<long long>(spec.heads), static_cast<long long>(spec.context),
      static_cast<long long>(spec.vocab));
  std::printf("  task       %s\n", task->describe(spec).c_str());
  std::printf("  file       an llm.c GPT-2 checkpoint, %.2f MB\n",
              static_cast<double>(std::filesystem::file_size(path)) / 1e6);
}

}  // namespace qkv::cli
