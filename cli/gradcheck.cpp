// qkv gradcheck: every parameter's gradient against central differences, in float64.
#include <chrono>
#include <cstdio>

#include <cxxopts.hpp>

#include "bounds.h"
#include "commands.h"
#include "common.h"
#include "model_spec.h"

namespace qkv::cli {

// A fresh model's dropout in gradcheck: on, so the check covers its masks (replayed in every evaluation).
constexpr double kFreshDropout = 0.1;

namespace {
cxxopts::Options gradcheck_options() {
  cxxopts::Options options("qkv gradcheck", "Compare every parameter's gradient with central differences, in float64.");
  options.add_options()("model", "gpt | seq2seq | encoder | vit | recommender | mha (a small one)",
                        cxxopts::value<std::string>()->default_value("gpt"), "KIND")(
      "checkpoint", "check this trained model instead (or give it first)", cxxopts::value<std::string>(), "FILE")(
      "entries", "entries checked per parameter (0: all) (default: 0, or 16 with --checkpoint)",
      cxxopts::value<int64_t>(), "N")("seed", "seed", cxxopts::value<uint64_t>()->default_value("1"), "N")(
      "data",
      "with a text or digits --checkpoint: the text or CSV its batch comes from (default: the bundled text, "
      "for text models trained on it)",
      cxxopts::value<std::string>(),
      "FILE")("device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  add_part_options(options, "");
  return options;
}

// How many entries (--entries; all of a fresh model's, 16 of a checkpoint's), and a progress line.
GradcheckOptions check_options(const cxxopts::ParseResult& args, bool fresh_model) {
  int64_t entries = args.count("entries") ? args["entries"].as<int64_t>() : -1;
  if (args.count("entries")) check_range("entries", entries, 0, int64_t{1} << 30);
  GradcheckOptions go;
  go.max_entries = entries >= 0 ? entries : (fresh_model ? 0 : 16);
  // Every weight of a text model takes an hour on 2 cores: say how far it got, at most ten times a second.
  go.progress = [shown = std::chrono::steady_clock::time_point{}](int64_t done, int64_t total) mutable {
    auto now = std::chrono::steady_clock::now();
    if (done < total && now - shown < std::chrono::milliseconds(100)) return;
    shown = now;
    progress_line(done < total ? cat("gradcheck: ", done, " of ", total, " entries") : "");
  };
  return go;
}
}  // namespace

int gradcheck(int argc, char** argv) {
  cxxopts::Options options = gradcheck_options();
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  const Device device = set_device_option(args["device"].as<std::string>());
  manual_seed(args["seed"].as<uint64_t>());
  Generator gen(args["seed"].as<uint64_t>());
  std::string path = args.count("checkpoint") ? args["checkpoint"].as<std::string>() : "",
              kind = args["model"].as<std::string>();
  QKV_CHECK(path.empty() || !args.count("model"),
            "--model builds a fresh model; --checkpoint checks a trained one: give one");
  QKV_CHECK(!path.empty() || kind == "mha" || is_kind(kind), "unknown --model '", printable(kind), "' (", kind_names(),
            ", mha)");
  // A --model's float64 passes are too small to share (on 2 cores every kind ran slower on two threads than on
  // one: seq2seq 2.62 s against 2.20 s); a checkpoint (GPT-2's, say) takes the idle cores, as elsewhere.
  const nn::BlockParts parts = part_flags(args, path.empty() && kind != "mha");
  set_thread_count(path.empty() ? 1 : 0);
  const GradcheckOptions go = check_options(args, path.empty());

  std::unique_ptr<Runner> runner;
  std::unique_ptr<nn::MultiHeadAttention> mha;
  Tensor x;
  std::function<Tensor()> loss;
  nn::MhaOptions mha_options;
  if (!path.empty() || kind != "mha") {
    if (!path.empty()) {
      runner = load_runner(path);
      use_data_flag(*runner, args, path);  // its batch comes from a text or CSV named here
    } else {
      QKV_CHECK(!args.count("data"), "--data goes with a text or digits --checkpoint");
      ModelSpec spec = small_model_spec(kind);  // on the kind's first task (reverse for the sequence kinds)
      spec.dropout = kFreshDropout;
      spec.parts = parts;
      runner = std::make_unique<Runner>(spec);
    }
    const int64_t batch = runner->task().family() == TaskFamily::Sequence ? 3 : 2;  // short examples: one more
    // float64, the composed attention (its n x n scores) and the gradients: a training step's bytes, twice
    // (training_bytes counts a task's short examples, not its context).
    if (device.is_cpu())
      check_fits_in_memory(
          2 * training_bytes(runner->spec(), batch),
          cat(path.empty() ? kind : printable(path), ": its float64 loss and gradients on ", batch, " examples"),
          "check it on a machine with more memory");
    runner->module().to(DType::Float64);
    runner->to(device);
    runner->module().train();  // dropout on; gradcheck replays its masks
    loss = runner->task().fixed_batch_loss(*runner, batch, gen);
  } else {
    mha = std::make_unique<nn::MultiHeadAttention>(8, 2, kFreshDropout);
    mha->to(DType::Float64);
    mha->to(device);
    x = Tensor::randn({2, 5, 8}, DType::Float64, &gen).to(device);
    mha_options.causal = true;
    mha_options.key_padding_mask = nn::key_padding_mask({5, 3}, 5).to(device);
    loss = [&] { return mha->forward(x, mha_options).output; };
  }
  auto params = runner ? runner->module().named_parameters() : mha->named_parameters();
  GradcheckResult r = gradcheck_leaves(loss, params, go);
  // An entry passes within atol + rtol·|numeric|: "of tol" is the largest share of that an entry used, so a
  // row whose relative error is above rtol shows why it still passed (its entries were near 0: atol held).
  std::printf("%-40s %-12s %12s %12s %8s  %s\n", "parameter", "shape", "max abs err", "max rel err", "of tol", "ok");
  for (const InputReport& in : r.inputs)
    std::printf("%-40s %-12s %12.3e %12s %8.3g  %s\n", in.name.c_str(), shape_str(in.shape).c_str(), in.max_abs_error,
                in.relative_text().c_str(), in.max_tolerance_share, in.ok ? "ok" : "FAILED");
  const double dropout = runner ? runner->spec().dropout : kFreshDropout;
  std::printf(
      "%s: %zu parameters, float64%s, %s, %s entries each, within atol %g + rtol %g x |numeric| (of tol <= 1): "
      "%s\n",
      printable(path.empty() ? kind : path).c_str(), r.inputs.size(),
      device.is_cpu() ? "" : (" on " + device.str()).c_str(), dropout > 0 ? "dropout on (masks replayed)" : "dropout 0",
      go.max_entries ? cat("up to ", go.max_entries).c_str() : "all", go.atol, go.rtol, r.ok ? "all ok" : "FAILED");
  return r.ok ? 0 : 1;
}

}  // namespace qkv::cli
