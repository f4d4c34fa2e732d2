// qkv export: a checkpoint's model in another framework's files. Today one
// format, a Hugging Face GPT-2 folder (nn/gpt2_files.h), which
// GPT2LMHeadModel.from_pretrained reads back with the same logits.
#include <cstdio>

#include <cxxopts.hpp>

#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "io/safetensors.h"
#include "nn/gpt2_files.h"

namespace qkv::cli {

int export_model(int argc, char** argv) {
  cxxopts::Options options("qkv export",
                           "A checkpoint's model as a Hugging Face GPT-2 folder (config.json, model.safetensors, "
                           "and a BPE model's vocab.json and merges.txt or tokenizer.json).");
  options.custom_help("CHECKPOINT --format hf --out DIR [OPTION...]");
  options.add_options()("checkpoint", "(required; or give it first) a gpt checkpoint file or GPT-2 folder",
                        cxxopts::value<std::string>(),
                        "FILE")("format", "(required) hf: a Hugging Face GPT-2 folder", cxxopts::value<std::string>(),
                                "NAME")("out", "(required) the folder to write", cxxopts::value<std::string>(), "DIR")(
      "force", "replace a folder an earlier export wrote");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  const std::string path = required(args, "checkpoint"), format = required(args, "format"), out = required(args, "out");
  QKV_CHECK(format == "hf", "--format ", printable(format), ": qkv exports hf (a Hugging Face GPT-2 folder)");
  stop_if_parse_only();
  io::OutputFolder folder(out, "--out", args.count("force") > 0, {".json", ".safetensors", ".txt"}, "--force");
  auto runner = load_runner(path);
  const ModelSpec& spec = runner->spec();
  // GPT-2 is a pre-LN GPT with full attention; anything else would load into GPT2LMHeadModel as another model.
  QKV_CHECK(spec.model == "gpt", printable(path), " is ", with_article(spec.model),
            " model; a Hugging Face GPT-2 folder holds a gpt");
  QKV_CHECK(!spec.post_ln && spec.attention == "full", printable(path), " has ",
            spec.post_ln ? "post-LN blocks" : spec.attention + " attention",
            "; GPT-2 is pre-LN with full attention, so transformers would read another model");
  QKV_CHECK(spec.parts == nn::BlockParts{}, printable(path), " has ", spec.parts.str(),
            " parts; GPT-2's are LayerNorm, the GELU MLP, a learned position table and a key/value head per head, so "
            "transformers would read another model");
  const auto& gpt = dynamic_cast<const nn::GPT&>(runner->module());
  io::save_safetensors(folder.path_for("model.safetensors"),
                       nn::gpt2_tensors(gpt, [](const std::string&, const Tensor& p) { return p.to(DType::Float32); }),
                       {{"format", "pt"}});
  folder.write("config.json", nn::gpt2_config_json(gpt.config()));
  for (const auto& [name, text] : spec.tokenizer_files) folder.write(name, text);
  folder.commit();
  std::printf("wrote %s: config.json, model.safetensors (%lld parameters, float32)%s\n", printable(out).c_str(),
              static_cast<long long>(spec.parameter_count()),
              spec.tokenizer_files.empty() ? "; no tokenizer: the model reads bytes, ids 0-255 (GPT2Tokenizer does not)"
              : spec.tokenizer_files.count("tokenizer.json") ? " and tokenizer.json"
                                                             : ", vocab.json and merges.txt");
  return 0;
}

}  // namespace qkv::cli
