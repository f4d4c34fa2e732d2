// qkv grads: a checkpoint's loss and gradients on one input, as a table and a file.
#include <cmath>
#include <cstdio>

#include <cxxopts.hpp>

#include "bounds.h"
#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "io/safetensors.h"
#include "nn/gpt2_files.h"

namespace qkv::cli {

namespace {
// The norm of rows [r0, r1) and columns [c0, c1) of a row-major matrix v with `cols` columns.
double block_norm(const std::vector<double>& v, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  double sq = 0;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) sq += v[r * cols + c] * v[r * cols + c];
  return std::sqrt(sq);
}
}  // namespace

int grads(int argc, char** argv) {
  cxxopts::Options options("qkv grads",
                           "Loss and every parameter's gradient on one input: a table of norms (per head for "
                           "attention) and a safetensors file to compare with another framework.");
  options.custom_help("CHECKPOINT --prompt TEXT --out FILE [OPTION...]");
  options.add_options()("checkpoint", "(required; or give it first) checkpoint file (any model kind) or GPT-2 folder",
                        cxxopts::value<std::string>(), "FILE")(
      "prompt",
      "(required) text models: the text (up to context + 1 bytes, or tokens of a GPT-2 folder's model); task models: "
      "an input, answered correctly",
      cxxopts::value<std::string>(),
      "TEXT")("out", "(required) output safetensors file (loss and grad.<name>)", cxxopts::value<std::string>(),
              "FILE")("force", "replace an existing --out");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = required(args, "checkpoint"), text = required(args, "prompt"), out = required(args, "out");
  io::check_output_file(out, "--out", args.count("force") > 0, {path}, "--force");
  auto runner = load_runner(path);
  const ModelSpec& spec = runner->spec();
  runner->module().eval();
  std::string what;
  Tensor loss;
  try {
    loss = input_loss(*runner, text, &what);
  } catch (const Error& e) {
    throw Error(cat("--prompt: ", e.what()));  // the input's errors say "prompt" or "input", not which flag
  }
  loss.backward();
  io::NamedTensors tensors{{"loss", loss.detach()}};
  // A GPT-2 folder's gradients go under its own names and layouts, to compare with PyTorch's directly.
  const bool gpt2 = nn::is_gpt2_folder(path) || nn::is_llmc_checkpoint(path);
  if (gpt2)
    for (auto& [name, g] : nn::gpt2_tensors(dynamic_cast<const nn::GPT&>(runner->module()),
                                            [](const std::string&, const Tensor& p) { return p.grad(); }))
      tensors.emplace_back("grad." + name, g);
  std::printf("%s: %.6f\n\n%-36s %-12s %12s  %s\n", what.c_str(), loss.item(), "parameter", "shape", "grad norm",
              "per head (attention projections)");
  const int64_t heads = spec.heads, d = spec.width / spec.heads;
  for (const auto& [name, p] : runner->module().named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype());
    if (!gpt2) tensors.emplace_back("grad." + name, g);
    std::vector<double> values = g.to_vector();
    std::string per_head;
    bool attention =
        name.find("attn.") != std::string::npos && g.dim() == 2 && g.size(0) == spec.width && g.size(1) == spec.width;
    if (attention) {
      // q/k/v projections: head h owns output rows [h·d, (h+1)·d); out_proj: input columns.
      bool out_proj = name.find("out_proj") != std::string::npos;
      for (int64_t h = 0; h < heads; ++h) {
        double n = out_proj ? block_norm(values, spec.width, 0, spec.width, h * d, (h + 1) * d)
                            : block_norm(values, spec.width, h * d, (h + 1) * d, 0, spec.width);
        char cell[24];
        std::snprintf(cell, sizeof cell, "%s%.3e", h ? " " : "", n);
        per_head += cell;
      }
    }
    std::printf("%-36s %-12s %12.4e%s%s\n", name.c_str(), shape_str(p.shape()).c_str(),
                block_norm(values, g.numel(), 0, 1, 0, g.numel()), per_head.empty() ? "" : "  ", per_head.c_str());
  }
  io::save_safetensors(out, tensors, {{"qkv.checkpoint", printable(path)}, {"qkv.input", printable(text)}},
                       existing_for(args));
  std::printf("\nwrote loss and %zu gradients to %s%s (compare them with cli/compare_grads.py)\n", tensors.size() - 1,
              printable(out).c_str(),
              gpt2 ? " under GPT-2's names and layouts (transformer.h.N.attn.c_attn.weight, [in, out])" : "");
  return 0;
}

}  // namespace qkv::cli
