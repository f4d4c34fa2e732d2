// qkv eval, sample, attention, gradcheck and grads (the commands that read a
// checkpoint and look inside it), and the option helpers every command shares.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <cxxopts.hpp>

#include "autograd/ops/attention.h"
#include "bounds.h"
#include "commands.h"
#include "distributed/dist.h"
#include "heatmaps.h"
#include "io/metadata.h"
#include "io/output.h"
#include "page.h"
#include "runner.h"

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
  QKV_CHECK(runner.spec().task == "digits", "--data is for digits models (a held-out image's number); ",
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
  // A million examples take a minute: say how far it got, after the first chunk and then at most ten times a second.
  std::chrono::steady_clock::time_point shown{};
  runner->on_progress = [&](int64_t done, int64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done < total && shown != std::chrono::steady_clock::time_point{} &&
        now - shown < std::chrono::milliseconds(100))
      return;
    shown = now;
    progress_line(done < total
                      ? cat("eval: ", done, " of ", total, runner->spec().task == "text" ? " windows" : " examples")
                      : "");
  };
  if (runner->label_task()) {
    print_label_metrics(path, *runner, runner->evaluate_labels(count, gen));
  } else if (runner->task()) {
    double acc = runner->accuracy(count, gen);
    std::printf("%s: %s %s, exact match %.2f%% on %lld fresh held-out examples\n", printable(path).c_str(),
                runner->spec().model.c_str(), runner->spec().task.c_str(), 100 * acc, static_cast<long long>(count));
  } else {
    // A file's context sizes the windows: 2^18 once asked for 8.6 GB of logits with no estimate.
    const int64_t at_once = std::min<int64_t>(32, count);  // held_out_loss's batches
    if (device.is_cpu())
      check_fits_in_memory(
          forward_bytes(runner->spec(), at_once),
          cat(printable(path), ": its loss on ", at_once, " windows of ", runner->spec().context, " bytes at a time"),
          "evaluate it on a machine with more memory");
    double loss = runner->held_out_loss(count, gen);
    std::printf("%s: held-out loss %.4f nats/byte = %.4f bits/byte over %lld window%s of %lld bytes\n",
                printable(path).c_str(), loss, loss / std::log(2.0), static_cast<long long>(count),
                count == 1 ? "" : "s", static_cast<long long>(runner->spec().context));
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
      "data", kDigitsDataHelp, cxxopts::value<std::string>(), "FILE")("threads", "threads (0: one per idle core)",
                                                                      cxxopts::value<int>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args["threads"].as<int>());
  const Device device = set_device_option(args["device"].as<std::string>());
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt");
  double temperature = args["temperature"].as<double>();
  int64_t top_k = args["top-k"].as<int64_t>(), max_new = args["max-new"].as<int64_t>();
  QKV_CHECK(temperature >= 0, "--temperature must be >= 0, got ", temperature);
  QKV_CHECK(top_k >= 0, "--top-k must be >= 0, got ", top_k);
  QKV_CHECK(!args.count("top-k") || temperature > 0, "--top-k limits sampling: it needs --temperature above 0");
  check_range("max-new", max_new, 0, 100000);
  auto runner = load_runner(path);
  runner->to(device);
  use_digits_data(*runner, args, path);
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
      cxxopts::value<std::string>(), "FOLDER")("force", "replace the earlier result in --out")(
      "data", kDigitsDataHelp, cxxopts::value<std::string>(), "FILE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt"), out = required(args, "out");
  io::OutputFolder folder(out, "--out", args.count("force") > 0, {".svg", ".html"}, "--force");  // before any work
  auto runner = load_runner(path);
  use_digits_data(*runner, args, path);
  std::vector<AttentionMap> maps = runner->attention(prompt);
  check_page_size(maps);  // before a picture is drawn (a 3000-byte prompt drew 1.5 GB of them first)
  auto write = [&](const std::string& name, const std::string& text) { folder.write(name, text); };
  const int64_t heads = runner->spec().heads;
  // Each map and head as an SVG of its own (and each map's mean over its heads);
  // a classifier's [CLS] row also over the image or the tokens, shown on the page too.
  nlohmann::json figures = nlohmann::json::array();
  const int64_t window = attention_window(runner->spec());
  for (const AttentionMap& map : maps) {
    const int64_t rows = static_cast<int64_t>(map.rows.size()), cols = static_cast<int64_t>(map.cols.size());
    const std::vector<bool> masked = masked_cells(map, window);
    if (map.cls_first) figures.push_back({{"title", map.name}, {"svg", cls_views(map, heads, write)}});
    std::vector<double> all = map.weights.to_vector(), mean(rows * cols, 0.0);
    for (int64_t h = 0; h <= heads; ++h) {
      bool average = h == heads;
      std::vector<double> w =
          average ? mean : std::vector<double>(all.begin() + h * rows * cols, all.begin() + (h + 1) * rows * cols);
      if (!average)
        for (int64_t k = 0; k < rows * cols; ++k) mean[k] += w[k] / static_cast<double>(heads);
      write(average ? cat(map.file, "_mean.svg") : cat(map.file, "_head", h, ".svg"),
            heatmap_svg(w, rows, cols, map.rows, map.cols,
                        average ? cat(map.name, ", mean of ", heads, " heads") : cat(map.name, ", head ", h), map.split,
                        masked));
    }
  }
  nlohmann::json attention = attention_json(maps, window, false);
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

// A fresh model's dropout in gradcheck: on, so the check covers its masks (replayed in every evaluation).
constexpr double kFreshDropout = 0.1;

int gradcheck(int argc, char** argv) {
  cxxopts::Options options("qkv gradcheck", "Compare every parameter's gradient with central differences, in float64.");
  options.add_options()("model", "gpt | seq2seq | encoder | vit | recommender | mha (a small one)",
                        cxxopts::value<std::string>()->default_value("gpt"), "KIND")(
      "checkpoint", "check this trained model instead", cxxopts::value<std::string>(), "FILE")(
      "entries", "entries checked per parameter (0: all) (default: 0, or 16 with --checkpoint)",
      cxxopts::value<int64_t>(), "N")("seed", "seed", cxxopts::value<uint64_t>()->default_value("1"), "N")(
      "data",
      "with a text or digits --checkpoint: the text or CSV its batch comes from (default: the bundled text, "
      "for text models trained on it)",
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
  QKV_CHECK(!path.empty() || kind == "mha" || is_driver_kind(kind), "unknown --model '", printable(kind), "' (",
            driver_kind_names(), ", mha)");
  int64_t entries = args.count("entries") ? args["entries"].as<int64_t>() : -1;
  if (args.count("entries")) check_range("entries", entries, 0, int64_t{1} << 30);
  GradcheckOptions go;
  go.max_entries = entries >= 0 ? entries : (path.empty() ? 0 : 16);
  // Every weight of a text model takes an hour on 2 cores: say how far it got, at most ten times a second.
  std::chrono::steady_clock::time_point shown{};
  go.progress = [&](int64_t done, int64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done < total && now - shown < std::chrono::milliseconds(100)) return;
    shown = now;
    progress_line(done < total ? cat("gradcheck: ", done, " of ", total, " entries") : "");
  };

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
      runner = std::make_unique<Runner>(spec);
    }
    const int64_t batch = runner->task() ? 3 : 2;
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
    loss = runner->fixed_batch_loss(batch, gen);
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
  std::printf("%-40s %-12s %12s %12s  %s\n", "parameter", "shape", "max abs err", "max rel err", "ok");
  for (const InputReport& in : r.inputs)
    std::printf("%-40s %-12s %12.3e %12s  %s\n", in.name.c_str(), shape_str(in.shape).c_str(), in.max_abs_error,
                in.relative_text().c_str(), in.ok ? "ok" : "FAILED");
  const double dropout = runner ? runner->spec().dropout : kFreshDropout;
  std::printf(
      "%s: %zu parameters, float64%s, %s, %s entries each, atol %g rtol %g: %s\n",
      printable(path.empty() ? kind : path).c_str(), r.inputs.size(),
      device.is_cpu() ? "" : (" on " + device.str()).c_str(), dropout > 0 ? "dropout on (masks replayed)" : "dropout 0",
      go.max_entries ? cat("up to ", go.max_entries).c_str() : "all", go.atol, go.rtol, r.ok ? "all ok" : "FAILED");
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
  io::check_output_file(out, "--out", args.count("force") > 0, {path}, "--force");
  auto runner = load_runner(path);
  const ModelSpec& spec = runner->spec();
  runner->module().eval();
  std::string what;
  Tensor loss;
  try {
    loss = input_loss(*runner, text, &what);
  } catch (const Error& e) {
    throw Error(cat("--text: ", e.what()));  // the input's errors say "prompt" or "input", not which flag
  }
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
    std::printf("%-36s %-12s %12.4e%s%s\n", name.c_str(), shape_str(p.shape()).c_str(),
                block_norm(values, g.numel(), 0, 1, 0, g.numel()), per_head.empty() ? "" : "  ", per_head.c_str());
  }
  io::save_safetensors(out, tensors, {{"qkv.checkpoint", printable(path)}, {"qkv.input", printable(text)}});
  std::printf("\nwrote loss and %zu gradients to %s (compare them with cli/compare_grads.py)\n", tensors.size() - 1,
              printable(out).c_str());
  return 0;
}

}  // namespace qkv::cli
