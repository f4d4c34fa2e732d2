// qkv eval, sample, attention, gradcheck, grads and bench.
#include <cblas.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <cxxopts.hpp>

#include "autograd/cpu.h"
#include "autograd/ops/attention.h"
#include "autograd/simd.h"
#include "bounds.h"
#include "commands.h"
#include "dist/dist.h"
#include "heatmaps.h"
#include "io/metadata.h"
#include "io/output.h"
#include "optim/optim.h"
#include "page.h"
#include "runner.h"
#include "train/trainer.h"

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

std::string required(const cxxopts::ParseResult& args, const char* name) {
  QKV_CHECK(args.count(name) && !args[name].as<std::string>().empty(), "--", name, " is required");
  return args[name].as<std::string>();
}

// A checkpoint's model, parameters loaded (optimizer state ignored).
std::unique_ptr<Runner> load_runner(const std::string& path, std::map<std::string, std::string>* metadata) {
  io::TensorFile file = io::load_safetensors(path);
  if (metadata) *metadata = file.metadata;
  ModelSpec spec = ModelSpec::from_metadata(file.metadata, path);
  spec.check_tensors(file, path);  // before anything is allocated for the model
  // The bundled digits are small and never a path from the file: read them at once.
  auto runner = std::make_unique<Runner>(spec, nullptr, /*read_text=*/spec.task == "digits" && spec.data.empty());
  nn::load_into(runner->module(), file, path, {"optimizer."});
  runner->module().eval();
  return runner;
}

// A text checkpoint reads the text --data names, or the bundled text if it
// trained on that: never a path taken from the checkpoint. Other models take no --data.
void use_data_flag(Runner& runner, const cxxopts::ParseResult& args, const std::string& path) {
  const std::string& task = runner.spec().task;
  if (task == "text" || task == "digits") {
    QKV_CHECK(args.count("data") || runner.spec().data.empty(), printable(path), " was trained on '",
              printable(runner.spec().data), "': give that ", task == "text" ? "text" : "CSV",
              " (or another) with --data FILE");
    if (args.count("data") || task == "text") runner.use_data(args.count("data") ? args["data"].as<std::string>() : "");
  } else {
    QKV_CHECK(!args.count("data"), "--data is for text and digits models; ", printable(path), " is a ", task, " model");
  }
}

Tensor input_loss(Runner& runner, const std::string& text, std::string* what) {
  Example e = runner.prompt_example(text, what);
  if (runner.spec().task == "text")
    return nn::cross_entropy(
        runner.forward_gpt(Tensor::from_vector(e.input, {1, static_cast<int64_t>(e.input.size())})),
        Tensor::from_vector(e.answer, {1, static_cast<int64_t>(e.answer.size())}));
  return runner.loss({e});
}

namespace {

// Accuracy and the confusion matrix (classes), or HR@10 and NDCG@10 against
// the most popular items (a recommender).
void print_label_metrics(const std::string& path, const Runner& runner, const LabelMetrics& m) {
  const ModelSpec& spec = runner.spec();
  const LabelTask& task = *runner.label_task();
  if (m.ranks) {
    std::printf("%s: %s %s, the last item of %lld held-out users, ranked among %lld items\n", printable(path).c_str(),
                spec.model.c_str(), spec.task.c_str(), static_cast<long long>(m.examples),
                static_cast<long long>(m.labels - 1));
    std::printf("  model                HR@10 %.4f  NDCG@10 %.4f\n", m.hit_rate, m.ndcg);
    std::printf("  most popular 10      HR@10 %.4f  NDCG@10 %.4f\n", m.popular_hit_rate, m.popular_ndcg);
    if (m.popular_hit_rate > 0)
      std::printf("  the model's HR@10 is %.2fx the popularity baseline's\n", m.hit_rate / m.popular_hit_rate);
    return;
  }
  std::printf("%s: %s %s, accuracy %.2f%% on %lld held-out examples\n", printable(path).c_str(), spec.model.c_str(),
              spec.task.c_str(), 100 * m.accuracy, static_cast<long long>(m.examples));
  // The matrix: one row per true label, one column per predicted label.
  size_t w = 5;
  for (int64_t k = 0; k < m.labels; ++k) w = std::max(w, task.label_text(k).size() + 1);
  std::printf("confusion matrix (rows: true label, columns: predicted)\n%*s", static_cast<int>(w), "");
  for (int64_t k = 0; k < m.labels; ++k) std::printf("%*s", static_cast<int>(w), task.label_text(k).c_str());
  std::printf("\n");
  for (int64_t t = 0; t < m.labels; ++t) {
    std::printf("%*s", static_cast<int>(w), task.label_text(t).c_str());
    for (int64_t k = 0; k < m.labels; ++k)
      std::printf("%*lld", static_cast<int>(w), static_cast<long long>(m.confusion[t * m.labels + k]));
    std::printf("\n");
  }
}

// A label model's answer: the class with its probabilities, or the 10 likeliest next items.
void sample_labels(Runner& runner, const std::string& prompt) {
  const LabelTask& task = *runner.label_task();
  Example e = task.parse_prompt(prompt);
  if (int64_t side = task.image_side()) {  // the image itself, in grey levels
    static const char* kShades[] = {"  ", "..", "::", "oo", "OO", "@@"};
    for (int64_t r = 0; r < side; ++r) {
      std::string line = "  ";
      for (int64_t c = 0; c < side; ++c) line += kShades[std::min<int64_t>(5, (e.input[r * side + c] * 6) / 17)];
      std::printf("%s\n", line.c_str());
    }
  }
  const bool items = task.ranks_items();
  std::string input;
  for (int64_t id : e.input) input += (input.empty() || !items ? "" : " ") + task.token_text(id);
  std::printf("%s ->", task.image_side() ? "image" : input.c_str());
  auto top = runner.top_labels(e, 10);
  if (items) {
    std::printf(" the 10 likeliest next items:\n");
    for (const auto& [label, p] : top) std::printf("  %-20s p %.4f\n", task.label_text(label).c_str(), p);
    return;
  }
  std::printf(" %s (p %.4f)", task.label_text(top[0].first).c_str(), top[0].second);
  for (size_t i = 1; i < top.size(); ++i)
    std::printf("%s %s %.4f", i == 1 ? "; then" : ",", task.label_text(top[i].first).c_str(), top[i].second);
  if (e.answer.size() == 1) std::printf("; the right label is %s", task.label_text(e.answer[0]).c_str());
  std::printf("\n");
}

}  // namespace

int eval(int argc, char** argv) {
  cxxopts::Options options("qkv eval",
                           "Exact-match accuracy on fresh held-out examples, held-out text loss, a classifier's "
                           "accuracy and confusion matrix, or a recommender's HR@10 and NDCG@10 against the most "
                           "popular items.");
  options.custom_help("--checkpoint FILE [OPTION...]");
  options.add_options()("checkpoint", "(required) checkpoint file", cxxopts::value<std::string>(), "FILE")(
      "examples",
      cat("held-out examples (tasks; digits and sessions use at most their fixed split) or windows (text), in ",
          range(1, kMaxExamples)),
      cxxopts::value<int64_t>()->default_value("1000"),
      "N")("seed", "seed of the held-out draw", cxxopts::value<uint64_t>()->default_value("2024"), "N")(
      "data",
      "text and digits models: the text or CSV to evaluate on (default: the bundled one, for models trained on it)",
      cxxopts::value<std::string>(),
      "FILE")("threads", "threads (0: one per idle core)", cxxopts::value<int>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args["threads"].as<int>());
  const Device device = set_device_option(args["device"].as<std::string>());
  std::string path = required(args, "checkpoint");
  int64_t count = args["examples"].as<int64_t>();
  check_range("examples", count, 1, kMaxExamples);
  auto runner = load_runner(path);
  runner->to(device);
  use_data_flag(*runner, args, path);
  Generator gen(args["seed"].as<uint64_t>() ^ 0xe7a1ULL);
  if (runner->label_task()) {
    print_label_metrics(path, *runner, runner->evaluate_labels(count, gen));
  } else if (runner->task()) {
    double acc = runner->accuracy(count, gen);
    std::printf("%s: %s %s, exact match %.2f%% on %lld fresh held-out examples\n", printable(path).c_str(),
                runner->spec().model.c_str(), runner->spec().task.c_str(), 100 * acc, static_cast<long long>(count));
  } else {
    double loss = runner->held_out_loss(count, gen);
    std::printf("%s: held-out loss %.4f nats/byte = %.4f bits/byte over %lld windows of %lld bytes\n",
                printable(path).c_str(), loss, loss / std::log(2.0), static_cast<long long>(count),
                static_cast<long long>(runner->spec().context));
  }
  return 0;
}

int sample(int argc, char** argv) {
  cxxopts::Options options("qkv sample",
                           "Answer a prompt (tasks), continue it (text), classify it (brackets, digits) or "
                           "recommend the next items (sessions).");
  options.custom_help("--checkpoint FILE --prompt TEXT [OPTION...]");
  options.add_options()("checkpoint", "(required) checkpoint file", cxxopts::value<std::string>(), "FILE")(
      "prompt",
      "(required) input, e.g. 123456 for reverse, 123+45 for add, any text for text, ([]) for brackets, a held-out "
      "image's "
      "number or 64 comma-separated pixels for digits, item ids '12 13 14' for sessions",
      cxxopts::value<std::string>(),
      "TEXT")("temperature", "0: greedy; else sample softmax(logits / T)", cxxopts::value<double>()->default_value("0"),
              "T")("top-k", "sample among the k likeliest (0: all)", cxxopts::value<int64_t>()->default_value("0"),
                   "K")("max-new", "bytes to generate (text)", cxxopts::value<int64_t>()->default_value("200"), "N")(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1"), "N")(
      "no-cache", "recompute the whole prefix for every token instead of keeping keys and values (GPT)")(
      "threads", "threads (0: one per idle core)", cxxopts::value<int>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args["threads"].as<int>());
  const Device device = set_device_option(args["device"].as<std::string>());
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt");
  double temperature = args["temperature"].as<double>();
  int64_t top_k = args["top-k"].as<int64_t>(), max_new = args["max-new"].as<int64_t>();
  QKV_CHECK(temperature >= 0, "--temperature must be >= 0");
  QKV_CHECK(top_k >= 0, "--top-k must be >= 0");
  QKV_CHECK(!args.count("top-k") || temperature > 0, "--top-k limits sampling: it needs --temperature above 0");
  QKV_CHECK(max_new >= 0 && max_new <= 100000, "--max-new must be in [0, 100000]");
  auto runner = load_runner(path);
  runner->to(device);
  runner->set_use_cache(!args.count("no-cache"));
  Generator gen(args["seed"].as<uint64_t>());
  if (runner->label_task()) {
    sample_labels(*runner, prompt);
  } else if (runner->task()) {
    std::vector<int64_t> input = runner->task()->encode(prompt);
    std::vector<int64_t> out = runner->answer({input}, temperature, top_k, &gen).front();
    std::printf("%s = %s\n", runner->task()->input_text(input).c_str(), runner->task()->answer_text(out).c_str());
  } else {
    // Bytes as generated, NUL bytes included (printf would stop at the first).
    // To a terminal, control bytes other than newlines and tabs are shown
    // escaped (\x1b): a prompt or a sample must not move the cursor or set
    // the window's title. Into a pipe or a file the bytes stay as they are.
    std::string out = prompt + runner->continue_text(prompt, max_new, temperature, top_k, gen);
    if (isatty(fileno(stdout))) out = escape_control_bytes(out, /*keep_lines=*/true);
    out += "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

int attention(int argc, char** argv) {
  cxxopts::Options options("qkv attention",
                           "Draw every layer's and head's attention for a prompt: index.html (the attention views of "
                           "qkv explore, alone) and one SVG per map and head.");
  options.custom_help("--checkpoint FILE --prompt TEXT --out FOLDER [OPTION...]");
  options.add_options()("checkpoint", "(required) checkpoint file (any kind but linear attention)",
                        cxxopts::value<std::string>(),
                        "FILE")("prompt", "(required) the prompt (a task input is shown with the model's answer)",
                                cxxopts::value<std::string>(), "TEXT")(
      "out", "(required) output folder: index.html and one SVG per map and head (created; it holds this result alone)",
      cxxopts::value<std::string>(), "FOLDER")("force", "replace the earlier result in --out");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt"), out = required(args, "out");
  io::OutputFolder folder(out, "--out", args.count("force") > 0, {".svg", ".html"});  // checked before any work
  auto runner = load_runner(path);
  std::vector<AttentionMap> maps = runner->attention(prompt);
  auto write = [&](const std::string& name, const std::string& text) { folder.write(name, text); };
  const int64_t heads = runner->spec().heads;
  // Each map and head as an SVG of its own (and each map's mean over its heads);
  // a classifier's [CLS] row also over the image or the tokens, shown on the page too.
  nlohmann::json figures = nlohmann::json::array();
  for (const AttentionMap& map : maps) {
    const int64_t rows = static_cast<int64_t>(map.rows.size()), cols = static_cast<int64_t>(map.cols.size());
    if (map.cls_first) figures.push_back({{"title", map.name}, {"svg", cls_views(map, heads, write)}});
    std::vector<double> all = map.weights.to_vector(), mean(rows * cols, 0.0);
    for (int64_t h = 0; h <= heads; ++h) {
      bool average = h == heads;
      std::vector<double> w =
          average ? mean : std::vector<double>(all.begin() + h * rows * cols, all.begin() + (h + 1) * rows * cols);
      if (!average)
        for (int64_t k = 0; k < rows * cols; ++k) mean[k] += w[k] / static_cast<double>(heads);
      write(
          average ? cat(map.file, "_mean.svg") : cat(map.file, "_head", h, ".svg"),
          heatmap_svg(w, rows, cols, map.rows, map.cols,
                      average ? cat(map.name, ", mean of ", heads, " heads") : cat(map.name, ", head ", h), map.split));
    }
  }
  nlohmann::json attention = attention_json(maps, attention_window(runner->spec()), false);
  attention["figures"] = figures;
  attention["note"] = cat(driver_kind(runner->spec().model).title, driver_kind(runner->spec().model).maps_note);
  write("index.html", page_html({{"title", cat("qkv attention: ", page_token(path))},
                                 {"subtitle", cat(page_token(prompt), ": ", maps.size(), " maps x ", heads, " heads")},
                                 {"attention", attention}}));
  folder.commit();
  std::printf("wrote %zu heatmaps (%zu maps x %lld heads, and each map's mean) and index.html to %s\n",
              maps.size() * static_cast<size_t>(heads + 1), maps.size(), static_cast<long long>(heads),
              printable(out).c_str());
  return 0;
}

int gradcheck(int argc, char** argv) {
  cxxopts::Options options("qkv gradcheck", "Compare every parameter's gradient with central differences, in float64.");
  options.add_options()("model", "gpt | seq2seq | encoder | vit | recommender | mha (a small one)",
                        cxxopts::value<std::string>()->default_value("gpt"), "KIND")(
      "checkpoint", "check this trained model instead", cxxopts::value<std::string>(), "FILE")(
      "entries", "entries checked per parameter (0: all) (default: 0, or 16 with --checkpoint)",
      cxxopts::value<int64_t>(), "N")("seed", "seed", cxxopts::value<uint64_t>()->default_value("1"), "N")(
      "data",
      "with a text --checkpoint: the text its batch comes from (default: the bundled text, for models "
      "trained on it)",
      cxxopts::value<std::string>(),
      "FILE")("device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  const Device device = set_device_option(args["device"].as<std::string>());
  manual_seed(args["seed"].as<uint64_t>());
  Generator gen(args["seed"].as<uint64_t>());
  std::string path = args.count("checkpoint") ? args["checkpoint"].as<std::string>() : "",
              kind = args["model"].as<std::string>();
  QKV_CHECK(path.empty() || !args.count("model"),
            "--model builds a fresh model; --checkpoint checks a trained one: give one");
  int64_t entries = args.count("entries") ? args["entries"].as<int64_t>() : -1;
  GradcheckOptions go;
  go.max_entries = entries >= 0 ? entries : (path.empty() ? 0 : 16);

  std::unique_ptr<Runner> runner;
  std::unique_ptr<nn::MultiHeadAttention> mha;
  Tensor x;
  std::function<Tensor()> loss;
  nn::MhaOptions mha_options;
  if (!path.empty() || kind != "mha") {
    if (!path.empty()) {
      runner = load_runner(path);
      use_data_flag(*runner, args, path);  // its batch comes from a text named here
    } else {
      QKV_CHECK(!args.count("data"), "--data goes with a text --checkpoint");
      ModelSpec spec = small_model_spec(kind);  // on the kind's first task (reverse for the sequence kinds)
      spec.dropout = 0.1;
      runner = std::make_unique<Runner>(spec);
    }
    runner->module().to(DType::Float64);
    runner->to(device);
    runner->module().train();  // dropout on; gradcheck replays its masks
    loss = runner->fixed_batch_loss(runner->task() ? 3 : 2, gen);
  } else {
    mha = std::make_unique<nn::MultiHeadAttention>(8, 2, 0.1);
    mha->to(DType::Float64);
    mha->to(device);
    x = Tensor::randn({2, 5, 8}, DType::Float64, &gen).to(device);
    mha_options.causal = true;
    mha_options.key_padding_mask = nn::key_padding_mask({5, 3}, 5).to(device);
    loss = [&] { return mha->forward(x, mha_options).output; };
  }
  auto params = runner ? runner->module().named_parameters() : mha->named_parameters();
  GradcheckResult r = gradcheck_leaves(loss, params, go);
  std::printf("%-40s %-12s %12s %12s  %s\n", "parameter", "shape", "max abs err", "max rel err", "ok");
  for (const InputReport& in : r.inputs)
    std::printf("%-40s %-12s %12.3e %12.3e  %s\n", in.name.c_str(), shape_str(in.shape).c_str(), in.max_abs_error,
                in.max_rel_error, in.ok ? "ok" : "FAILED");
  std::printf("%s: %zu parameters, float64%s, dropout on (masks replayed), %s entries each, atol %g rtol %g: %s\n",
              printable(path.empty() ? kind : path).c_str(), r.inputs.size(),
              device.is_cpu() ? "" : (" on " + device.str()).c_str(),
              go.max_entries ? std::to_string(go.max_entries).c_str() : "all", go.atol, go.rtol,
              r.ok ? "all ok" : "FAILED");
  return r.ok ? 0 : 1;
}

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
  options.custom_help("--checkpoint FILE --text TEXT --out FILE [OPTION...]");
  options.add_options()("checkpoint", "(required) checkpoint file (any model kind)", cxxopts::value<std::string>(),
                        "FILE")(
      "text", "(required) text models: the text (up to context + 1 bytes); task models: an input, answered correctly",
      cxxopts::value<std::string>(),
      "TEXT")("out", "(required) output safetensors file (loss and grad.<name>)", cxxopts::value<std::string>(),
              "FILE")("force", "replace an existing --out");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = required(args, "checkpoint"), text = required(args, "text"), out = required(args, "out");
  io::check_output_file(out, "--out", args.count("force") > 0, {path});
  auto runner = load_runner(path);
  const ModelSpec& spec = runner->spec();
  runner->module().eval();
  std::string what;
  Tensor loss = input_loss(*runner, text, &what);
  loss.backward();
  io::NamedTensors tensors{{"loss", loss.detach()}};
  std::printf("%s: %.6f\n\n%-36s %-12s %12s  %s\n", what.c_str(), loss.item(), "parameter", "shape", "grad norm",
              "per head (attention projections)");
  const int64_t heads = spec.heads, d = spec.width / spec.heads;
  for (const auto& [name, p] : runner->module().named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype());
    tensors.emplace_back("grad." + name, g);
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
    std::printf("%-36s %-12s %12.4e  %s\n", name.c_str(), shape_str(p.shape()).c_str(),
                block_norm(values, g.numel(), 0, 1, 0, g.numel()), per_head.c_str());
  }
  io::save_safetensors(out, tensors, {{"qkv.checkpoint", printable(path)}, {"qkv.input", printable(text)}});
  std::printf("\nwrote loss and %zu gradients to %s (compare them with examples/compare_grads.py)\n",
              tensors.size() - 1, printable(out).c_str());
  return 0;
}

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double peak_rss_mib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}
// Median GFLOP/s of cblas_sgemm on C[n, m] = A[n, k]·B[k, m], in this process with its threads.
double sgemm_gflops(int64_t n, int64_t k, int64_t m) {
  Tensor a = Tensor::randn({n, k}), b = Tensor::randn({k, m}), c = Tensor::empty({n, m});
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0f, a.data<float>(), k, b.data<float>(), m, 0.0f,
                c.data<float>(), m);
    if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * m * k / median_of(times) / 1e9;
}
}  // namespace

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
  if (count == 0) return "built in; no CUDA device visible";
  std::string out;
  for (int i = 0; i < count; ++i)
    out += cat(i ? "\n             " : "", "cuda:", i, " ", device_backend(Device::cuda(i)).describe(i));
  return out;
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
    std::printf("system\n  cpu        %s, %u cores (%d thread%s by default)\n  kernels    %s\n",
                cpu_model_name().c_str(), std::thread::hardware_concurrency(), get_num_threads(),
                get_num_threads() == 1 ? "" : "s", cpu::describe_kernels().c_str());
    if (std::string w = cpu::blas_warning(); !w.empty()) std::printf("  warning    %s\n", w.c_str());
    std::printf("  cuda       %s\n", describe_cuda().c_str());
    if (!args.count("checkpoint")) return 0;
  }
  std::string path = required(args, "checkpoint");
  io::TensorFile file = io::load_safetensors(path);
  ModelSpec spec = ModelSpec::from_metadata(file.metadata, path);
  spec.check_tensors(file, path);  // the model is described, never built
  auto meta = [&](const char* key) {
    return file.metadata.count(key) ? printable(file.metadata.at(key)) : std::string("-");
  };
  std::printf("%s\n", printable(path).c_str());
  std::printf(
      "  model      %s, %lld parameters: width %lld, %lld layers%s, %lld heads, context %lld, vocab %lld, %s "
      "attention%s, dropout %g\n",
      spec.model.c_str(), static_cast<long long>(spec.parameter_count()), static_cast<long long>(spec.width),
      static_cast<long long>(spec.layers), driver_kind(spec.model).layers_are, static_cast<long long>(spec.heads),
      static_cast<long long>(spec.context), static_cast<long long>(spec.vocab), spec.attention.c_str(),
      spec.post_ln ? ", post-LN" : "", spec.dropout);
  if (spec.task == "text")
    std::printf("  task       text, trained on %s\n",
                spec.data.empty() ? "the bundled text" : ("'" + printable(spec.data) + "'").c_str());
  else if (spec.task == "add")
    std::printf("  task       add, %lld-digit operands\n", static_cast<long long>(spec.digits));
  else if (spec.task == "digits")
    std::printf("  task       digits, %lld x %lld images in %lld x %lld patches, %lld classes, trained on %s\n",
                static_cast<long long>(spec.image), static_cast<long long>(spec.image),
                static_cast<long long>(spec.patch), static_cast<long long>(spec.patch),
                static_cast<long long>(spec.classes),
                spec.data.empty() ? "the bundled digits" : ("'" + printable(spec.data) + "'").c_str());
  else if (spec.task == "brackets")
    std::printf("  task       brackets, up to %lld brackets, %s pooling\n", static_cast<long long>(spec.max_len),
                spec.pooling.c_str());
  else if (spec.task == "sessions")
    std::printf("  task       sessions, histories of up to %lld items\n", static_cast<long long>(spec.max_len));
  else
    std::printf("  task       %s, inputs up to %lld digits\n", spec.task.c_str(), static_cast<long long>(spec.max_len));
  std::printf("  step       %s\n  optimizer  %s %s\n", meta("qkv.step").c_str(), meta("qkv.optimizer").c_str(),
              meta("qkv.optimizer.hyperparameters").c_str());
  if (file.metadata.count("qkv.train")) {
    std::string settings;
    // As the flags that give them: a switch appears only when on (train takes no value for it).
    for (const auto& [k, v] : io::parse_json_object(file.metadata.at("qkv.train"))) {
      if (k == "checkpoint-activations" && v == "0") continue;
      settings +=
          (settings.empty() ? "" : " ") + ("--" + k + (k == "checkpoint-activations" ? "" : " " + printable(v)));
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

namespace {

// A bench configuration: the model (or layer) and its global batch.
struct BenchSetup {
  std::string name, kernel;
  nn::GPTConfig c;
  int64_t B = 0, warmup = 0, steps = 0;
  Device device;  // where the model, its batches and its optimizer live
};

// What timing one configuration measured.
struct BenchTiming {
  std::vector<double> ms;  // each timed step, sorted
  double flops_per_step = 0;
  int64_t parameters = 0;
  size_t allreduced_bytes = 0;
};

BenchSetup bench_setup(const cxxopts::ParseResult& args, int ranks) {
  BenchSetup b;
  b.name = args["config"].as<std::string>(), b.kernel = args["kernel"].as<std::string>();
  QKV_CHECK(b.kernel == "fused" || b.kernel == "composed", "--kernel must be fused or composed, got '",
            printable(b.kernel), "'");
  nn::GPTConfig& c = b.c;
  const std::string& config = b.name;
  // context, layers, heads, width, batch
  struct Row {
    const char* name;
    int64_t T, L, H, C, B;
  };
  static const Row kConfigs[] = {{"tiny", 64, 2, 4, 128, 16},  {"small", 256, 4, 8, 256, 8},
                                 {"mini", 128, 6, 6, 384, 4},  {"long", 1024, 2, 4, 128, 2},
                                 {"deep", 512, 6, 6, 384, 4},  {"attention", 256, 1, 8, 256, 8},
                                 {"layer", 1024, 1, 8, 256, 1}};
  const Row* row = nullptr;
  for (const Row& r : kConfigs)
    if (config == r.name) row = &r;
  QKV_CHECK(row, "unknown --config '", printable(config), "' (tiny, small, mini, long, deep, attention, layer)");
  c.vocab = 256, c.context = row->T, c.layers = row->L, c.heads = row->H, c.width = row->C, b.B = row->B;
  // Under mpirun the GPT configs train data parallel: B is the global batch.
  QKV_CHECK(ranks == 1 || (config != "attention" && config != "layer"), "--config ", config,
            " times one process; under mpirun use a GPT config");
  QKV_CHECK(b.B % ranks == 0, "--config ", config, "'s batch ", b.B, " does not split evenly over ", ranks, " ranks");
  int64_t context = args["context"].as<int64_t>();
  QKV_CHECK(context >= 0 && context <= 1 << 20, "--context must be in [0, 1048576], got ", context);
  if (context > 0) c.context = context;
  // A flag a config ignores is refused rather than reported as if it applied.
  QKV_CHECK(!args.count("attention") || config != "attention",
            "--attention is for the GPT configs and layer: "
            "--config attention times full causal attention alone");
  QKV_CHECK(!args.count("checkpoint-activations") || (config != "attention" && config != "layer"),
            "--checkpoint-activations is for the GPT configs (tiny, small, mini, long, deep)");
  c.attention = nn::AttentionKind::parse(args["attention"].as<std::string>());
  c.checkpoint_activations = args.count("checkpoint-activations") > 0;
  c.fused_attention = b.kernel == "fused";
  b.steps = args["steps"].as<int64_t>(), b.warmup = args["warmup"].as<int64_t>();
  check_range("steps", b.steps, 1, 1 << 20);
  check_range("warmup", b.warmup, 0, 1 << 20);
  return b;
}

// Runs warmup + steps calls of `step`, keeping the times of the last `steps`.
template <class Step> std::vector<double> time_steps(const BenchSetup& b, Step&& step) {
  std::vector<double> ms;
  for (int64_t i = 0; i < b.warmup + b.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    device_backend(b.device).synchronize(b.device.index);  // a device's work is queued: wait for it
    if (i >= b.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

// One layer's attention alone (no projections): the fused kernel or the composed path.
BenchTiming time_attention(const BenchSetup& b, Generator& gen) {
  const nn::GPTConfig& c = b.c;
  BenchTiming t;
  int64_t hd = c.width / c.heads;
  auto leaf = [&] {
    return Tensor::randn({b.B, c.context, c.heads, hd}, DType::Float32, &gen).to(b.device).requires_grad_();
  };
  Tensor q = leaf(), k = leaf(), v = leaf();
  Tensor causal = nn::causal_mask(c.context, c.context).to(b.device);
  t.ms = time_steps(b, [&] {
    for (Tensor* x : {&q, &k, &v}) x->zero_grad();
    if (b.kernel == "fused") {
      sum(fused_attention(q, k, v, {Tensor(), Tensor(), true}, 1 / std::sqrt(static_cast<double>(hd)))).backward();
    } else {
      auto heads = [](const Tensor& x) { return permute(x, {0, 2, 1, 3}); };
      Tensor o = nn::scaled_dot_product_attention(heads(q), heads(k), heads(v), causal).output;
      sum(permute(o, {0, 2, 1, 3})).backward();
    }
  });
  // scores and weighted sum, 2·B·T²·C each, x3 for backward (causal half not discounted)
  t.flops_per_step = 3.0 * 2 * 2.0 * b.B * c.context * c.context * c.width;
  return t;
}

// One causal MHA layer, projections included, with the chosen attention.
BenchTiming time_layer(const BenchSetup& b, Generator& gen) {
  const nn::GPTConfig& c = b.c;
  BenchTiming t;
  nn::MultiHeadAttention mha(c.width, c.heads);
  mha.to(b.device);
  t.parameters = mha.num_parameters();
  nn::MhaOptions options;
  options.causal = true;
  options.kind = c.attention;
  options.fused = c.fused_attention;
  Tensor x = Tensor::randn({b.B, c.context, c.width}, DType::Float32, &gen).to(b.device).requires_grad_();
  t.ms = time_steps(b, [&] {
    mha.zero_grad();
    x.zero_grad();
    sum(mha.forward(x, options).output).backward();
  });
  double span = c.attention.type == nn::AttentionKind::Window ? std::min<double>(c.context, c.attention.window + 1)
                                                              : static_cast<double>(c.context);
  t.flops_per_step = 3.0 * (4 * 2.0 * b.B * c.context * c.width * c.width + 2 * 2.0 * b.B * c.context * span * c.width);
  return t;
}

// A GPT's training step through the library's Trainer (train/trainer.h), as
// qkv train runs it: the interval between steps is what is timed.
BenchTiming time_gpt(const BenchSetup& b, Generator& gen) {
  const nn::GPTConfig& c = b.c;
  const int ranks = dist::world_size();
  BenchTiming t;
  nn::GPT gpt(c);
  gpt.to(b.device);
  t.parameters = gpt.num_parameters();
  optim::AdamOptions o;
  o.lr = 1e-4;
  optim::AdamW opt(gpt.named_parameters(), o);
  optim::ConstantLR constant(1e-4);
  std::vector<Tensor> params = gpt.parameters();
  dist::broadcast(params);
  if (ranks > 1) t.allreduced_bytes = static_cast<size_t>(t.parameters) * sizeof(float);  // every gradient, once a step
  const int64_t slice = b.B / ranks;  // equal slices, so each rank's share is 1/ranks
  train::Trainer trainer(gpt.named_parameters(), opt, constant,
                         {.steps = b.warmup + b.steps, .eval_every = b.warmup + b.steps, .clip = 1.0});
  trainer.loss = [&](int64_t) {
    Tensor ids = Tensor::randint(0, 256, {slice, c.context}, &gen).to(b.device),
           targets = Tensor::randint(0, 256, {slice, c.context}, &gen).to(b.device);
    return train::StepLoss{nn::cross_entropy(gpt.forward(ids), targets), 1.0 / ranks, slice * c.context};
  };
  auto last = std::chrono::steady_clock::now();
  // Each step reads its loss and gradient norm back, so a device has finished the step by then.
  trainer.on_step = [&](const train::Progress& p) {  // rank 0: the time since the previous step ended
    auto now = std::chrono::steady_clock::now();
    if (p.step > b.warmup) t.ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  };
  trainer.run();
  // 6 FLOPs per weight per token (forward 2, backward 4) for the blocks' 12·C² and the tied head's V·C,
  // and 12·L·T·C per token for attention's two products (scores, weighted sum; causal half not discounted).
  double matmul_weights =
      static_cast<double>(c.layers) * 12 * c.width * c.width + static_cast<double>(c.vocab) * c.width;
  t.flops_per_step = b.B * c.context * (6 * matmul_weights + 12.0 * c.layers * c.context * c.width);
  return t;
}

void report_bench(const BenchSetup& b, BenchTiming& t) {
  const nn::GPTConfig& c = b.c;
  const int ranks = dist::world_size();
  std::sort(t.ms.begin(), t.ms.end());
  double median = t.ms[t.ms.size() / 2];
  double step_gflops = t.flops_per_step / (median / 1000) / 1e9;
  std::printf("bench %s: T=%lld L=%lld heads=%lld C=%lld B=%lld, %lld parameters, %s %s attention%s\n", b.name.c_str(),
              static_cast<long long>(c.context), static_cast<long long>(c.layers), static_cast<long long>(c.heads),
              static_cast<long long>(c.width), static_cast<long long>(b.B), static_cast<long long>(t.parameters),
              c.attention.str().c_str(), b.kernel.c_str(),
              c.checkpoint_activations ? ", blocks recomputed in backward" : "");
  std::printf("  median %.2f ms/step over %lld steps (min %.2f, max %.2f), %.0f tokens/s\n", median,
              static_cast<long long>(b.steps), t.ms.front(), t.ms.back(), b.B * c.context / (median / 1000));
  if (ranks > 1) {
    // The other ranks are busy stepping: a reference sgemm here would be timed against them.
    std::printf(
        "  %d ranks (MPI) x %d thread%s, B/%d = %lld examples each; %.2f MB of gradients all-reduced per step\n", ranks,
        get_num_threads(), get_num_threads() == 1 ? "" : "s", ranks, static_cast<long long>(b.B / ranks),
        t.allreduced_bytes / 1e6);
  } else if (!b.device.is_cpu()) {
    DeviceBackend& backend = device_backend(b.device);
    std::printf("  %.1f GFLOP/s in the step on %s (%s)\n", step_gflops, b.device.str().c_str(),
                backend.describe(b.device.index).c_str());
    std::printf("  peak device memory %.1f MiB\n", backend.memory(b.device.index).peak / 1048576.0);
  } else {
    // The model's largest product: the MLP's [B·T, C]·[C, 4C] (for attention alone, a head's scores [T, d]·[d, T];
    // for one layer, a projection [B·T, C]·[C, C]).
    int64_t gm = b.name == "attention" ? c.context : b.name == "layer" ? c.width : 4 * c.width;
    int64_t gn = b.name == "attention" ? c.context : b.B * c.context,
            gk = b.name == "attention" ? c.width / c.heads : c.width;
    double blas = sgemm_gflops(gn, gk, gm);
    std::printf("  %.1f GFLOP/s in the step; sgemm %lldx%lldx%lld here: %.1f GFLOP/s; step/sgemm %.2f\n", step_gflops,
                static_cast<long long>(gn), static_cast<long long>(gk), static_cast<long long>(gm), blas,
                step_gflops / blas);
  }
  std::printf("  peak resident memory %.1f MiB\n", peak_rss_mib());
  std::printf("  %d thread%s, %s\n", get_num_threads(), get_num_threads() == 1 ? "" : "s",
              cpu::describe_kernels().c_str());
}

}  // namespace

int bench(int argc, char** argv) {
  cxxopts::Options options("qkv bench",
                           "Time full training steps (forward, loss, backward, clip, AdamW) on random bytes.");
  options.add_options()("config",
                        "tiny | small | mini | long | deep (T=512 L=6 C=384 B=4); attention (causal "
                        "attention alone, B=8 n=256 C=256 8 heads); layer (one causal MHA layer, B=1 C=256 8 heads, "
                        "n = --context)",
                        cxxopts::value<std::string>()->default_value("tiny"),
                        "NAME")("steps", "timed steps", cxxopts::value<int64_t>()->default_value("10"), "N")(
      "context", "sequence length (0: the config's)", cxxopts::value<int64_t>()->default_value("0"), "N")(
      "attention", "full | window:W | linear, for the GPT configs and layer",
      cxxopts::value<std::string>()->default_value("full"),
      "KIND")("checkpoint-activations", "GPT configs: recompute each block in backward")(
      "warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value("3"), "N")(
      "kernel", "attention kernel: fused (default) or composed", cxxopts::value<std::string>()->default_value("fused"),
      "NAME")("threads", "threads per process (0: one per idle core)", cxxopts::value<int>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args["threads"].as<int>());
  const Device device = set_device_option(args["device"].as<std::string>());
  BenchSetup b = bench_setup(args, dist::world_size());
  b.device = device;
  if (!device.is_cpu()) device_backend(device).reset_peak(device.index);
  manual_seed(1);
  Generator gen(7);
  BenchTiming t = b.name == "attention" ? time_attention(b, gen)
                  : b.name == "layer"   ? time_layer(b, gen)
                                        : time_gpt(b, gen);
  if (dist::rank() != 0) return 0;  // the ranks step together (the all-reduce waits for the slowest): rank 0 reports
  report_bench(b, t);
  return 0;
}

}  // namespace qkv::cli
