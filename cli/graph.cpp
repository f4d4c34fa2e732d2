// qkv graph: the autograd graph of one forward and backward, drawn from the
// engine's own recorded nodes (autograd/graph_dot.h) as Graphviz DOT, and as
// SVG when Graphviz's `dot` is installed.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "autograd/graph_dot.h"
#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "study/op_names.h"

extern char** environ;

namespace qkv::cli {

namespace {

// The first attention module (a scope ending in "attn") in data-flow order;
// "" when the model is one attention layer itself.
std::string first_attention(const Graph& graph) {
  for (const GraphNode& node : graph.nodes) {
    const std::string& s = node.scope;
    size_t dot = s.rfind('.');
    std::string last = dot == std::string::npos ? s : s.substr(dot + 1);
    if (last == "attn" || last == "cross_attn") return s;
  }
  return "";
}

// Runs `dot -Tsvg dot_path -o svg_path` without a shell (no file name is
// ever interpreted). Returns false when Graphviz is not installed.
bool render_svg(const std::string& dot_path, const std::string& svg_path) {
  std::vector<std::string> words{"dot", "-Tsvg", dot_path, "-o", svg_path};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid;
  int err = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
  if (err == ENOENT) return false;
  QKV_CHECK(err == 0, "cannot run Graphviz's dot: ", std::strerror(err));
  io::set_writing_child(pid);  // a Ctrl-C ends dot too, before it can write its file again
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  io::set_writing_child(0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return false;  // a shell wrapper found no dot
  QKV_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "Graphviz's dot failed on ", printable(dot_path),
            WIFEXITED(status) ? cat(" (exit ", WEXITSTATUS(status), ")") : std::string(" (killed by a signal)"));
  return true;
}

// The DOT file and the SVG beside it, x.dot and x.svg, whichever of the two --out names: `out` becomes the
// DOT file's name, and the SVG's is returned.
std::string dot_and_svg(std::string& out) {
  QKV_CHECK(!out.empty(), "--out is empty");
  auto ends = [&](const char* ext) { return out.size() > 4 && out.substr(out.size() - 4) == ext; };
  // Another ending (g.png) once got DOT text under that name and the picture as g.png.svg.
  const std::string name = std::filesystem::path(out).filename().string();
  QKV_CHECK(ends(".dot") || ends(".svg") || name.find('.') == std::string::npos, "--out ", printable(out),
            ": the graph is written as DOT and SVG, x.dot and x.svg: name either (or x, without an ending)");
  if (ends(".svg")) out = out.substr(0, out.size() - 4) + ".dot";
  return ends(".dot") ? out.substr(0, out.size() - 4) + ".svg" : out + ".svg";
}

cxxopts::Options graph_options() {
  cxxopts::Options options("qkv graph",
                           "Draw the autograd graph of one forward and backward pass: one node per recorded op (its "
                           "output shape and gradient norm), parameters by name, one box per module.");
  options.add_options("model")("model", "a small fresh model: mha | gpt | seq2seq | encoder | vit | recommender",
                               cxxopts::value<std::string>()->default_value("mha"), "KIND")(
      "checkpoint", "draw this trained model instead, with --prompt (or give it first)", cxxopts::value<std::string>(),
      "FILE")("prompt", "with --checkpoint: the input (a task's question, answered correctly; or text)",
              cxxopts::value<std::string>(), "TEXT");
  add_part_options(options, "model");
  options.add_options("drawing")("focus",
                                 "draw one module in full: 'attention' (the first attention layer) or a module path "
                                 "such as blocks.1.attn (default: everything)",
                                 cxxopts::value<std::string>(), "MODULE")(
      "fused", "draw the fused attention kernel training runs, not attention's separate steps")(
      "out", "DOT file to write; the SVG goes beside it (x.dot and x.svg, whichever of the two is named)",
      cxxopts::value<std::string>()->default_value("graph.dot"),
      "FILE")("force", "replace an existing --out and its SVG");
  return options;
}

// The model a graph is drawn for, and the loss of its one forward: a checkpoint's on a prompt, a lone
// attention layer, or a small fresh model of a kind on one example of its first task.
struct Traced {
  std::unique_ptr<Runner> runner;
  std::unique_ptr<nn::MultiHeadAttention> mha;
  Tensor x, loss;
  std::string title;
  std::vector<std::pair<std::string, Tensor>> names() const {
    auto names = runner ? runner->module().named_parameters() : mha->named_parameters();
    if (x.defined()) names.emplace_back("x", x);
    return names;
  }
};

Traced forward(const std::string& path, const std::string& kind, const nn::BlockParts& parts, const std::string& prompt,
               bool fused) {
  Generator gen(1);
  manual_seed(1);
  Traced t;
  if (!path.empty()) {
    t.runner = load_runner(path);
    t.runner->set_fused_attention(fused);
    std::string what;
    t.loss = input_loss(*t.runner, prompt, &what);
    t.title = cat(printable(path), ": ", what);
  } else if (kind == "mha") {
    t.mha = std::make_unique<nn::MultiHeadAttention>(8, 2, 0.0, true, &gen);
    t.x = Tensor::randn({1, 4, 8}, DType::Float32, &gen).requires_grad_();
    nn::MhaOptions causal;
    causal.causal = true;
    causal.fused = fused;
    Tensor y = t.mha->forward(t.x, causal).output;
    t.loss = mean(mul(y, y));
    t.title = "MultiHeadAttention(d_model=8, heads=2), causal, on x [1, 4, 8]; loss = mean(output²)";
  } else {
    ModelSpec spec = small_model_spec(kind);
    spec.parts = parts;
    t.runner = std::make_unique<Runner>(spec, &gen);
    t.runner->set_fused_attention(fused);
    t.runner->module().eval();
    t.loss = t.runner->task().fixed_batch_loss(*t.runner, 1, gen)();
    const KindRow& row = t.runner->kind();
    t.title = cat(row.title, " (width 8, 2 heads, 2 layers", row.layers_are, ") on one ", spec.task,
                  " example; loss = cross-entropy of the ",
                  t.runner->task().family() == TaskFamily::Sequence ? "answer" : "label");
  }
  return t;
}

// The DOT file, and the SVG Graphviz renders from it (false where dot is not installed).
bool write_pictures(const std::string& out, const std::string& svg, const std::string& dot, io::Existing existing) {
  io::write_file(out, dot, existing);
  std::string svg_tmp = io::temporary_beside(svg);  // Graphviz writes it; then it is renamed into place
  bool rendered = false;
  try {
    rendered = render_svg(out, svg_tmp);
  } catch (...) {
    ::unlink(svg_tmp.c_str());
    throw;
  }
  if (rendered) io::commit_file(svg_tmp, svg, existing);
  return rendered;
}

void report(const Graph& graph, const GraphRecording& recording, const Traced& traced, const std::string& out,
            const std::string& svg, bool rendered, bool focused) {
  std::string ops;
  int64_t recorded = 0;
  for (const auto& [op, count] : recording.op_counts()) {
    ops += cat(ops.empty() ? "" : ", ", op, " ", count);
    recorded += count;
  }
  std::printf("%zu nodes: %zu ops and %zu leaves; loss %.6f\n", graph.nodes.size(), graph.op_count(),
              graph.nodes.size() - graph.op_count(), traced.loss.item());
  std::printf("the engine recorded %lld ops: %s\n", static_cast<long long>(recorded), ops.c_str());
  if (rendered) {
    std::printf("wrote %s and %s\n", printable(out).c_str(), printable(svg).c_str());
  } else {
    std::printf(
        "wrote %s; Graphviz's dot is not installed (Debian: apt-get install graphviz), so render it with\n"
        "  dot -Tsvg %s -o %s\n",
        printable(out).c_str(), printable(out).c_str(), printable(svg).c_str());
  }
  if (!focused && graph.nodes.size() > 60)
    std::printf(
        "a large picture: --focus attention draws one attention layer in full; qkv explore opens modules one "
        "by one in a browser\n");
  for (const auto& [name, p] : traced.names())
    if (name.size() >= 11 && name.compare(name.size() - 11, 11, "k_proj.bias") == 0) {
      std::printf(
          "no node for the key biases (k_proj.bias): softmax ignores what one adds to a query's whole row, so "
          "its gradient is exactly zero\n");
      break;
    }
}

}  // namespace

int graph(int argc, char** argv) {
  cxxopts::Options options = graph_options();
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = args.count("checkpoint") ? args["checkpoint"].as<std::string>() : "";
  std::string kind = args["model"].as<std::string>(), out = args["out"].as<std::string>();
  QKV_CHECK(path.empty() || !args.count("model"), "--model draws a fresh model; --checkpoint a trained one: give one");
  QKV_CHECK(!path.empty() || !args.count("prompt"),
            "--prompt goes with --checkpoint (a fresh --model has its own input)");
  QKV_CHECK(path.empty() || args.count("prompt"), "--checkpoint needs --prompt: the input whose graph is drawn");
  if (kind != "mha") kind_row(kind);  // a model kind the program drives, or a one-line error naming it
  const std::string svg = dot_and_svg(out);
  const bool force = args.count("force") > 0;
  io::check_output_file(out, "--out", force, {path}, "--force");
  io::check_output_file(svg, "--out", force, {path}, "--force");  // the message names the SVG's path

  GraphRecording recording;  // nodes get their module's name; the engine counts what it records
  // By default attention shows each of its steps.
  Traced traced = forward(path, kind, part_flags(args, path.empty() && kind != "mha"),
                          args.count("prompt") ? args["prompt"].as<std::string>() : "", args.count("fused") > 0);
  Graph graph = trace_graph(traced.loss, traced.names());
  graph.retain_grads();
  traced.loss.backward();

  std::string focus = args.count("focus") ? args["focus"].as<std::string>() : "";
  if (focus == "attention") focus = first_attention(graph);
  if (!focus.empty()) traced.title += cat(" — ", focus, " only");
  // The ops as the page's graph view names them (the mha model's attention is causal, as its title says).
  const bool causal = traced.runner ? traced.runner->kind().causal : true;
  GraphDotOptions dot_options{traced.title, focus, [&](const GraphNode& n) {
                                std::string name = study::readable_op(n.op, n.scope, causal);
                                return name == n.op ? name : cat(name, " (", n.op, ")");
                              }};
  const bool rendered = write_pictures(out, svg, graph_dot(graph, dot_options), existing_for(args));
  report(graph, recording, traced, out, svg, rendered, !focus.empty());
  return 0;
}

}  // namespace qkv::cli
