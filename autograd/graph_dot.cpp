#include "autograd/graph_dot.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/error.h"

namespace qkv {

std::string GraphNode::label() const {
  if (!op.empty()) return op;
  return name.empty() ? "input" : name.substr(name.rfind('.') + 1);
}

std::optional<double> GraphNode::grad_norm() const {
  Tensor grad = tensor.grad();
  if (!grad.defined()) return std::nullopt;
  double sq = 0;
  for (double v : grad.to_vector()) sq += v * v;
  return std::sqrt(sq);
}

size_t Graph::op_count() const {
  size_t n = 0;
  for (const GraphNode& node : nodes) n += !node.op.empty();
  return n;
}

void Graph::retain_grads() const {
  for (const GraphNode& node : nodes)
    if (!node.op.empty()) node.tensor.retain_grad();
}

Graph trace_graph(const Tensor& root, const std::vector<std::pair<std::string, Tensor>>& names) {
  QKV_CHECK(root.defined() && root.requires_grad(),
            "trace_graph: the tensor has no recorded graph (nothing it was computed from requires grad)");
  std::unordered_map<TensorImpl*, std::string> leaf_names;
  for (const auto& [name, t] : names)
    if (t.defined()) leaf_names.emplace(t.impl(), name);
  Graph graph;
  std::unordered_map<TensorImpl*, size_t> index;
  // The engine's own order (inputs first), so the picture shows what backward walks.
  for (Tensor& t : data_flow_order(root)) {
    const Node* node = t.impl()->grad_fn.get();
    QKV_CHECK(!node || !node->released, "trace_graph: backward() already freed the graph through '", node->op,
              "'; trace it before (or call backward with retain_graph)");
    GraphNode g;
    g.tensor = t;
    if (node) {
      g.op = node->op;
      g.scope = node->scope ? *node->scope : "";
      for (const Tensor& input : node->inputs)
        if (input.defined() && input.requires_grad()) g.inputs.push_back(index.at(input.impl()));
    } else if (auto it = leaf_names.find(t.impl()); it != leaf_names.end()) {
      g.name = it->second;
      size_t dot = g.name.rfind('.');
      g.scope = dot == std::string::npos ? "" : g.name.substr(0, dot);
    }
    index[t.impl()] = graph.nodes.size();
    graph.nodes.push_back(std::move(g));
  }
  return graph;
}

namespace {

// A DOT string's contents: quotes and backslashes escaped, other bytes shown printable.
std::string dot_text(const std::string& s) {
  std::string out;
  for (char c : printable(s)) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string norm_text(double norm) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "\\n|grad| %.2e", norm);
  return buf;
}

std::string parent_of(const std::string& scope) {
  size_t dot = scope.rfind('.');
  return dot == std::string::npos ? "" : scope.substr(0, dot);
}

}  // namespace

std::string graph_dot(const Graph& graph, const GraphDotOptions& options) {
  const std::string& focus = options.focus;
  auto inside = [&](const std::string& scope) {
    return focus.empty() || scope == focus || scope.rfind(focus + ".", 0) == 0;
  };
  const size_t n = graph.nodes.size();
  std::vector<bool> drawn(n);
  std::set<std::string> scopes;  // every module path some drawn node sits in, with its parents
  std::map<std::string, std::vector<size_t>> members;
  for (size_t i = 0; i < n; ++i) {
    drawn[i] = inside(graph.nodes[i].scope);
    if (!drawn[i]) continue;
    members[graph.nodes[i].scope].push_back(i);
    for (std::string s = graph.nodes[i].scope; !s.empty() && inside(s); s = parent_of(s)) scopes.insert(s);
  }
  if (members.empty()) {
    std::set<std::string> all;
    for (const GraphNode& node : graph.nodes)
      if (!node.scope.empty()) all.insert(node.scope);
    std::string known;
    for (const std::string& s : all) known += (known.empty() ? "" : ", ") + s;
    throw Error(cat("graph_dot: no node lies in module '", printable(focus),
                    "' (this graph's modules: ", known.empty() ? "none recorded" : known, ")"));
  }

  std::ostringstream out;
  out << "digraph qkv {\n"
      << "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, labelloc=t, nodesep=0.25, ranksep=0.3, label=\""
      << dot_text(options.title) << "\"];\n"
      << "  node [fontname=\"Helvetica\", fontsize=9, margin=\"0.08,0.03\"];\n"
      << "  edge [color=\"#555555\", arrowsize=0.6];\n";
  auto node_line = [&](size_t i, int indent) {
    const GraphNode& g = graph.nodes[i];
    std::optional<double> norm = g.grad_norm();
    const std::string name = !g.op.empty() && options.op_name ? options.op_name(g) : g.label();
    std::string label = dot_text(name) + "\\n" + shape_str(g.tensor.shape()) + (norm ? norm_text(*norm) : "");
    const char* look = !g.op.empty() ? (i + 1 == n ? "shape=box, style=\"rounded,filled,bold\", fillcolor=\"#c7e9c0\""
                                                   : "shape=box, style=\"rounded,filled\", fillcolor=\"#dbe9f6\"")
                                     : "shape=ellipse, style=filled, fillcolor=\"#fde0c5\"";
    out << std::string(indent, ' ') << "n" << i << " [" << look << ", label=\"" << label << "\"];\n";
  };
  int cluster = 0;
  // Nodes of `scope` itself, then one nested cluster per module below it.
  std::function<void(const std::string&, int)> emit = [&](const std::string& scope, int indent) {
    if (auto it = members.find(scope); it != members.end())
      for (size_t i : it->second) node_line(i, indent);
    for (const std::string& child : scopes)
      if (parent_of(child) == scope && child != scope) {
        std::string pad(indent, ' ');
        out << pad << "subgraph cluster_" << cluster++ << " {\n"
            << pad << "  label=\"" << dot_text(child) << "\"; style=rounded; color=\"#9a9a9a\"; fontsize=10;\n";
        emit(child, indent + 2);
        out << pad << "}\n";
      }
  };
  emit(focus.empty() ? "" : parent_of(focus), 2);  // the focus is the outermost box
  // Edges in data-flow order; inputs from outside a focus come from one dashed stand-in each.
  std::set<size_t> stand_ins;
  for (size_t i = 0; i < n; ++i) {
    if (!drawn[i]) continue;
    for (size_t j : graph.nodes[i].inputs) {
      if (!drawn[j] && stand_ins.insert(j).second) {
        const GraphNode& from = graph.nodes[j];
        std::string what = !from.op.empty() ? from.op : from.name.empty() ? "input" : from.name;
        out << "  s" << j << " [shape=box, style=\"rounded,dashed\", color=\"#888888\", fontcolor=\"#555555\", label=\""
            << dot_text((from.scope.empty() ? "" : from.scope + ": ") + what) << "\\n"
            << shape_str(from.tensor.shape()) << "\"];\n";
      }
      out << "  " << (drawn[j] ? "n" : "s") << j << " -> n" << i << ";\n";
    }
  }
  out << "}\n";
  return out.str();
}

}  // namespace qkv
