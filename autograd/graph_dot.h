// The autograd graph an expression recorded, as data and as a Graphviz
// picture: one node per recorded op (its name, output shape and the module
// whose forward recorded it), the leaves named, edges in data-flow order,
// and each node's gradient norm once a backward() has run.
//
//   GraphRecording recording;          // tag nodes with module scopes while the forward runs
//   Tensor loss = model_loss();
//   Graph graph = trace_graph(loss, model.named_parameters());
//   graph.retain_grads();              // keep every node's gradient, for its norm
//   loss.backward();
//   std::string dot = graph_dot(graph, {.title = "my model"});   // dot -Tsvg
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <functional>
#include "autograd/engine.h"

#include "autograd/tensor.h"

namespace qkv {

/// One tensor of a recorded graph: an op's output, or a leaf that requires grad.
struct GraphNode {
  Tensor tensor;               // kept alive by the graph
  std::string op;              // the op that recorded it; "" for a leaf
  std::string scope;           // the module that recorded it ("blocks.0.attn"); a named leaf's module
  std::string name;            // a leaf's name from trace_graph's `names` ("" when not named)
  std::vector<size_t> inputs;  // the nodes it was computed from, in argument order (indices into Graph::nodes)
  /// What a picture calls it: its op, a named leaf's last name part ("weight"), or "input".
  std::string label() const;
  /// The L2 norm of its gradient, once a backward() kept it (Graph::retain_grads); nullopt before.
  std::optional<double> grad_norm() const;
};

struct Graph {
  /// Data-flow order: every node after the nodes it was computed from; the root last.
  std::vector<GraphNode> nodes;
  /// The number of op (non-leaf) nodes.
  size_t op_count() const;
  /// Asks every op node to keep its gradient through the next backward()
  /// (Tensor::retain_grad), so that graph_dot can show each one's norm.
  void retain_grads() const;
};

/// Walks the graph recorded behind `root` (before its backward(), or after
/// one with retain_graph): the nodes the engine would visit, inputs that
/// need no gradient left out as the engine leaves them. `names` labels
/// leaves (e.g. a model's named_parameters()); a named leaf's scope is its
/// name without the last part ("blocks.0.attn.q_proj").
Graph trace_graph(const Tensor& root, const std::vector<std::pair<std::string, Tensor>>& names = {});

struct GraphDotOptions {
  std::string title;  // drawn above the graph
  /// Only nodes whose scope is this module path or lies inside it
  /// ("blocks.0.attn"); each input from outside becomes one dashed stand-in
  /// node. "" draws everything.
  std::string focus;
  /// What an op's box calls it (e.g. "causal mask" for masked_fill); unset: the op's own name.
  std::function<std::string(const GraphNode&)> op_name;
};

/// Graphviz DOT text: ops as boxes ("softmax", output shape, and
/// "|grad| 1.2e-03" when the node's gradient is known), leaves as ellipses,
/// the root highlighted, one nested cluster per module path. Throws
/// qkv::Error when `focus` matches no node.
std::string graph_dot(const Graph& graph, const GraphDotOptions& options = {});

}  // namespace qkv
