// qkv explore: one page to study a trained model on one prompt. The
// prompt's loss runs forward once, with every attention map kept, and
// backward once through the engine; the page then shows the attention
// (head, model and matrix views), dL/dP and each head's importance from that
// backward, the autograd graph of the same forward and backward, and the
// curves of the run's --log. --check compares dL/dP and the importances
// with central differences, in float64.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "nn/attention.h"
#include "study.h"
#include "study/neurons.h"
#include "study/page.h"
#include "study/page_data.h"

namespace qkv::cli {

namespace {

// --check: dL/dP, Σ P ⊙ dL/dP and token attribution as the page computes
// them (study(), the engine's backward), in float64, against central
// differences of the loss through nn::AttentionWeightsEdit (P + h·e for one
// entry; P scaled by 1 ± h for one head) and nn::EmbeddingEdit (a token's
// embedding scaled by 1 ± h). At most `per_map` entries of each map, drawn at
// random. A trained model's gradients are small, so the tolerance scales
// with each map's largest value (atol 1e-5 of it, rtol 1e-5), and the check
// passes only when a tenth of the values or more exceed 1% of that largest
// (so that it is not 0 = 0).
// Analytic values against central differences, tallied: the tolerance scales with the largest value of their
// map or list (`scale`: atol 1e-5 of it) and with the numeric value (rtol 1e-5).
struct Tally {
  static constexpr double h = 1e-6, atol = 1e-5, rtol = 1e-5;
  int64_t entries = 0, failed = 0, significant = 0;
  void compare(double analytic, double numeric, double scale, double& worst) {
    double err = std::fabs(analytic - numeric), tolerance = atol * scale + rtol * std::fabs(numeric) + 1e-12;
    worst = std::max(worst, err / tolerance);
    ++entries;
    if (err > tolerance) ++failed;
    if (std::fabs(numeric) > 0.01 * scale) ++significant;
  }
};

double largest(const std::vector<double>& v) {
  double top = 0;
  for (double x : v) top = std::max(top, std::fabs(x));
  return top;
}

// Up to `per_map` dL/dP entries of each map (drawn at random) and every head's gate, through
// nn::AttentionWeightsEdit; the worst errors into worst_p and worst_gate.
void check_maps(Runner& runner, const std::string& prompt, const Study& s, int64_t per_map, Tally& tally,
                double& worst_p, double& worst_gate) {
  const double h = Tally::h;
  auto loss_with = [&](const std::function<Tensor(int64_t, const Tensor&)>& edit) {
    NoGradGuard no_grad;
    nn::AttentionWeightsEdit scope(edit);
    return study(runner, prompt).loss.item();
  };
  Generator pick(1);
  for (size_t k = 0; k < s.maps.size(); ++k) {
    const Tensor& p = s.maps[k].weights;
    std::vector<double> grad = p.grad().to_vector();
    const int64_t cells = p.numel(), heads = p.size(-3);
    const double scale = largest(grad);
    for (int64_t n = 0; n < std::min(cells, per_map); ++n) {
      const int64_t i = cells <= per_map ? n : static_cast<int64_t>(pick.below(cells));
      auto nudge = [&](double by) {
        return [&, by](int64_t call, const Tensor& w) {
          if (call != static_cast<int64_t>(k)) return w;
          std::vector<double> e(cells, 0.0);
          e[i] = by;
          return add(w, Tensor::from_vector(e, w.shape()).to(w.dtype()));
        };
      };
      tally.compare(grad[i], (loss_with(nudge(h)) - loss_with(nudge(-h))) / (2 * h), scale, worst_p);
    }
    std::vector<double> gate = nn::head_gate_gradient(p, p.grad());
    const double gate_scale = largest(gate);
    for (int64_t head = 0; head < heads; ++head) {
      auto gated = [&](double by) {
        return [&, by](int64_t call, const Tensor& w) {
          if (call != static_cast<int64_t>(k)) return w;
          std::vector<double> g(heads, 1.0);
          g[head] = by;
          return mul(w, Tensor::from_vector(g, {1, heads, 1, 1}).to(w.dtype()));
        };
      };
      tally.compare(gate[head], (loss_with(gated(1 + h)) - loss_with(gated(1 - h))) / (2 * h), gate_scale, worst_gate);
    }
  }
}

// Token attribution: dL/de_t · e_t against d/dα L(α·e_t), by central differences, for up to `per_map` tokens.
// Returns how many were checked; the worst error into `worst`.
int64_t check_attribution(Runner& runner, const std::string& prompt, const Study& s, int64_t per_map, Tally& tally,
                          double& worst) {
  if (!s.embedding.defined()) return 0;
  const std::vector<double> attribution = token_attribution(s);
  const double scale = largest(attribution), h = Tally::h;
  const int64_t tokens = std::min<int64_t>(static_cast<int64_t>(attribution.size()), per_map);
  for (int64_t t = 0; t < tokens; ++t)
    tally.compare(
        attribution[t],
        (loss_with_token_scaled(runner, prompt, t, 1 + h) - loss_with_token_scaled(runner, prompt, t, 1 - h)) / (2 * h),
        scale, worst);
  return tokens;
}

bool check_study(Runner& runner, const std::string& prompt, int64_t per_map) {
  runner.module().to(DType::Float64);
  Study s = study(runner, prompt);
  s.loss.backward();
  Tally tally;
  double worst_p = 0, worst_gate = 0, worst_attribution = 0;
  check_maps(runner, prompt, s, per_map, tally, worst_p, worst_gate);
  const int64_t tokens_checked = check_attribution(runner, prompt, s, per_map, tally, worst_attribution);
  // The neuron view's numbers make the maps beside them: P from q and k, dL/dq and dL/dk from dL/dP.
  std::vector<std::vector<bool>> hidden;
  for (const AttentionMap& m : s.maps) hidden.push_back(masked_cells(m, attention_window(runner.spec())));
  const study::NeuronCheck neurons = check_neurons(s, hidden);
  const bool neurons_ok = neurons.heads > 0 && neurons.worst_p <= 1e-12 && neurons.worst_grad <= 1e-10;
  std::printf(
      "check: neuron view: %lld heads' softmax(scale·q·kᵀ) against their maps' P, and dL/dq, dL/dk "
      "from dL/dP through softmax's backward against the engine's, in float64: %s (worst |ΔP| %.2g, "
      "worst gradient error %.2g of its head's largest; bounds 1e-12 and 1e-10)\n",
      static_cast<long long>(neurons.heads), neurons_ok ? "all ok" : "FAILED", neurons.worst_p, neurons.worst_grad);
  const bool ok = tally.entries > 0 && tally.failed == 0 && tally.significant * 10 >= tally.entries;
  std::printf(
      "check: %lld values (dL/dP entries and head gates of %zu maps, and %lld tokens' attributions; %lld of them "
      "above 1%% of their map's or list's largest) against central differences in float64: %s (worst error %.2g of "
      "its tolerance for dL/dP, %.2g for the gates, %.2g for token attribution; atol %g of the largest, rtol %g)\n",
      static_cast<long long>(tally.entries), s.maps.size(), static_cast<long long>(tokens_checked),
      static_cast<long long>(tally.significant),
      ok             ? "all ok"
      : tally.failed ? cat(tally.failed, " FAILED").c_str()
                     : "FAILED (too few values far from 0 to tell)",
      worst_p, worst_gate, worst_attribution, Tally::atol, Tally::rtol);
  return ok && neurons_ok;
}

cxxopts::Options explore_options() {
  cxxopts::Options options("qkv explore",
                           "One offline HTML page to study a trained model on one prompt: its attention per layer "
                           "and head (head, model and matrix views) with dL/dP and each head's importance, the "
                           "autograd graph of the same forward and backward, and the training curves of its run.");
  options.custom_help("CHECKPOINT --prompt TEXT [OPTION...]");
  options.add_options()("checkpoint", "(required; or give it first) the trained model (any kind but linear attention)",
                        cxxopts::value<std::string>(), "FILE")(
      "prompt", "(required) the input: a task's question (its correct answer is scored), a labelled example, or text",
      cxxopts::value<std::string>(),
      "TEXT")("out", "the HTML file (default: the checkpoint's name with .html, or -2.html, -3.html, ... if taken)",
              cxxopts::value<std::string>(), "FILE")(
      "log", "a training log to draw (repeat to compare runs; default: the log the checkpoint's run wrote, if any)",
      cxxopts::value<std::vector<std::string>>(),
      "FILE")("force", "replace an existing --out")("data", kDigitsDataHelp, cxxopts::value<std::string>(), "FILE")(
      "check",
      "also compare dL/dP and the head importances, computed as for the page but in float64, with central "
      "differences of the loss; exit 1 if one differs");
  return options;
}

// The logs to draw: those named, else the run's own by the name train recorded (validated by log_beside,
// then read as any log is: bounded, parsed strictly). `note` says why there is none.
std::vector<std::string> logs_to_draw(const cxxopts::ParseResult& args, const std::string& path,
                                      const std::map<std::string, std::string>& metadata, const std::string& out,
                                      std::string& note) {
  if (args.count("log")) return args["log"].as<std::vector<std::string>>();
  std::string why, beside = log_beside(path, metadata, why);
  if (beside.empty()) {
    note = why + " (pass --log FILE)";  // why names the file through printable() already
    return {};
  }
  // An input too: --out m.jsonl --force once wrote the page over the log it read. (--force was checked before.)
  io::check_output_file(out, "--out", /*force=*/true, {beside});
  return {beside};
}

}  // namespace

int explore(int argc, char** argv) {
  cxxopts::Options options = explore_options();
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt");
  std::string stem =
      path.size() > 12 && path.substr(path.size() - 12) == ".safetensors" ? path.substr(0, path.size() - 12) : path;
  while (stem.size() > 1 && stem.back() == '/') stem.pop_back();  // a GPT-2 folder "gpt2/": its page is gpt2.html
  // A second page of one checkpoint (another prompt) gets a name of its own, as a second run's checkpoint does.
  std::string out = args.count("out") ? args["out"].as<std::string>() : fresh_name(stem, ".html", "--out");
  std::vector<std::string> inputs =
      args.count("log") ? args["log"].as<std::vector<std::string>>() : std::vector<std::string>{};
  inputs.push_back(path);
  if (args.count("data")) inputs.push_back(args["data"].as<std::string>());
  io::check_output_file(out, "--out", args.count("force") > 0, inputs, "--force");  // before any work

  std::map<std::string, std::string> metadata;
  auto runner = load_runner(path, &metadata);
  use_digits_data(*runner, args, path);
  std::string note;  // where the curves come from, or why there are none
  std::vector<std::string> logs = logs_to_draw(args, path, metadata, out, note);

  Study s = study(*runner, prompt);
  const ModelSpec& spec = runner->spec();
  study::PageOptions page;
  page.title = cat("qkv explore: ", study::page_token(path));
  page.subtitle = cat(study::page_token(prompt), ": ", s.what, " = ", s.loss.item());
  page.logs = logs;
  page.skip_unreadable_logs = !args.count("log");  // a log the user named must be drawn; the run's own may not be
  page.curves_note = note;
  page.window = attention_window(spec);
  page.note = cat(runner->kind().title, runner->kind().maps_note);
  page.model = {spec.model,  runner->kind().title, spec.task, study::page_token(path),
                spec.layers, spec.heads,           spec.width};
  page.causal_model = runner->kind().causal;
  study::PageSummary drawn;
  std::string html = study::page_html(s, runner->module(), page, &drawn);
  io::write_file(out, html, existing_for(args));
  std::printf(
      "wrote %s (%.0f KB): %zu attention maps x %lld heads with dL/dP and head importances, a graph of %zu "
      "nodes, %s\n",
      printable(out).c_str(), html.size() / 1024.0, s.maps.size(), static_cast<long long>(spec.heads),
      drawn.graph_nodes,
      drawn.logs == 0 ? cat("no curves: ", drawn.curves_note).c_str()
                      : cat("the curves of ", drawn.logs, drawn.logs == 1 ? " log" : " logs").c_str());
  std::printf("%s: %s = %.6f\n", printable(prompt).c_str(), s.what.c_str(), s.loss.item());
  if (args.count("check")) return check_study(*runner, prompt, 64) ? 0 : 1;
  return 0;
}

}  // namespace qkv::cli
