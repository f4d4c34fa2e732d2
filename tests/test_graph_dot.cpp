// The recorded graph as data and as DOT: trace_graph walks the engine's own
// nodes (one per recorded op, in data-flow order), module scopes tag them,
// retain_grad keeps intermediate gradients, graph_dot draws and escapes.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "autograd/graph_dot.h"
#include "compare.h"
#include "nn/nn.h"

using namespace qkv;
using Catch::Matchers::Contains;

TEST_CASE("retain_grad keeps a non-leaf's whole gradient through backward", "[graph]") {
  Tensor x = Tensor::from_vector<double>({1, -2, 3}).requires_grad_();
  Tensor y = x * 2.0;  // used twice below: its gradient sums both uses
  y.retain_grad();
  Tensor z = sum(y * y) + sum(y);
  z.backward();
  // dz/dy = 2y + 1 = 4x + 1.
  CHECK(y.grad().to_vector() == std::vector<double>{5, -7, 13});
  CHECK(x.grad().to_vector() == std::vector<double>{10, -14, 26});
  CHECK_THROWS_WITH(Tensor::ones({2}).retain_grad(), Contains("does not require grad"));
}

TEST_CASE("trace_graph lists the engine's nodes in data-flow order with module scopes", "[graph]") {
  nn::MultiHeadAttention mha(8, 2);
  mha.to(DType::Float64);
  Tensor x = Tensor::randn({1, 3, 8}, DType::Float64).requires_grad_();
  Tensor loss;
  std::map<std::string, int64_t> recorded;
  {
    GraphRecording recording;
    nn::MhaOptions causal;
    causal.causal = true;
    causal.fused = false;  // each step of attention an op of its own
    loss = sum(mha.forward(x, causal).output);
    recorded = recording.op_counts();
  }
  auto names = mha.named_parameters();
  names.emplace_back("x", x);
  Graph graph = trace_graph(loss, names);
  // One op node per recorded op, the same names as often.
  std::map<std::string, int64_t> traced;
  for (const GraphNode& node : graph.nodes)
    if (!node.op.empty()) ++traced[node.op];
  CHECK(traced == recorded);
  CHECK(graph.op_count() == 18);  // 4 linear, 4 reshape, 4 permute, 2 matmul, scale, mask, softmax, sum
  CHECK(recorded.at("softmax") == 1);
  CHECK(recorded.at("linear") == 4);
  // Data-flow order: inputs before the ops that use them; the loss last.
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (size_t j : graph.nodes[i].inputs) CHECK(j < i);
  CHECK(graph.nodes.back().tensor.impl() == loss.impl());
  // Leaves by name (the detached key bias is not part of the graph); ops by module.
  std::map<std::string, std::string> leaf_scope, op_scope;
  for (const GraphNode& node : graph.nodes) {
    if (node.op.empty())
      leaf_scope[node.name] = node.scope;
    else if (node.op == std::string("linear") || node.op == std::string("softmax"))
      op_scope[node.scope] = node.op;
  }
  CHECK(leaf_scope.count("k_proj.bias") == 0);
  CHECK(leaf_scope.at("q_proj.weight") == "q_proj");
  CHECK(leaf_scope.at("x") == "");
  CHECK(op_scope.at("k_proj") == "linear");
  CHECK(op_scope.at("out_proj") == "linear");
  CHECK(op_scope.at("") == "softmax");  // the attention itself runs in the MultiHeadAttention, the root here
}

TEST_CASE("module scopes are recorded only while a GraphRecording is alive", "[graph]") {
  nn::Linear lin(3, 2);
  Tensor y = lin(Tensor::ones({1, 3}));
  CHECK(y.grad_fn()->scope == nullptr);
  GraphRecording recording;
  Tensor z = lin(Tensor::ones({1, 3}));
  REQUIRE(z.grad_fn()->scope != nullptr);
  CHECK(*z.grad_fn()->scope == "");  // a root module's path is empty
  nn::GPT gpt(nn::GPTConfig{16, 8, 8, 2, 2});
  Tensor logits = gpt.forward(Tensor::from_vector<int64_t>({1, 2, 3}, {1, 3}));
  std::set<std::string> scopes;
  for (const GraphNode& node : trace_graph(logits).nodes)
    if (!node.op.empty()) scopes.insert(node.scope);
  for (const char* s :
       {"tok_emb", "blocks.0.ln1", "blocks.0.attn", "blocks.0.attn.out_proj", "blocks.1.mlp.fc2", "ln_f", ""})
    CHECK((scopes.count(s) == 1 ? "found" : s) == std::string("found"));  // names the missing scope
}

TEST_CASE("a module path runs through its parents, and a child outliving its parent becomes a root", "[graph]") {
  std::shared_ptr<nn::MultiHeadAttention> attn;
  {
    nn::GPT gpt(nn::GPTConfig{16, 8, 8, 2, 2});
    attn = gpt.blocks->operator[](1)->attn;
    CHECK(attn->path() == "blocks.1.attn");
    CHECK(attn->q_proj->path() == "blocks.1.attn.q_proj");
    CHECK(gpt.path() == "");
  }
  // The GPT is gone; the path must not walk through it (ASan would see it).
  CHECK(attn->path() == "");
  CHECK(attn->q_proj->path() == "q_proj");
}

TEST_CASE("graph_dot draws every node, gradient norms, clusters, and escapes labels", "[graph]") {
  Tensor w = Tensor::from_vector<double>({3, 4}, {2}).requires_grad_();
  Tensor x = Tensor::from_vector<double>({1, 1}, {2}).requires_grad_();
  Tensor loss = sum(w * x);
  Graph graph = trace_graph(loss, {{"layer.\"odd\\name", w}});
  graph.retain_grads();
  std::string before = graph_dot(graph, {"a \"title\""});
  CHECK_THAT(before, !Contains("|grad|"));
  loss.backward();
  std::string dot = graph_dot(graph, {"a \"title\""});
  CHECK_THAT(dot, Contains("label=\"a \\\"title\\\"\""));
  // The name as printable() shows it (its backslash doubled), then escaped for DOT; w's gradient is x = (1, 1).
  CHECK_THAT(dot, Contains(R"(label="\"odd\\\\name\n[2]\n|grad| 1.41e+00")"));
  CHECK_THAT(dot, Contains("label=\"layer\""));                          // the leaf's module as a cluster
  CHECK_THAT(dot, Contains("label=\"input\\n[2]\\n|grad| 5.00e+00\""));  // x's gradient is w = (3, 4)
  CHECK_THAT(dot, Contains("n0 -> n2;"));
  CHECK_THAT(dot, Contains("n1 -> n2;"));
  CHECK_THAT(dot, Contains("fillcolor=\"#c7e9c0\", label=\"sum\\n[]\\n|grad| 1.00e+00\""));  // the root
  CHECK_THROWS_WITH(graph_dot(graph, {"", "blocks.9"}), Contains("graph_dot: no node lies in module 'blocks.9'") &&
                                                            Contains("this graph's modules: layer"));
}

TEST_CASE("trace_graph refuses a graph backward() already freed, and a tensor without one", "[graph][errors]") {
  Tensor x = Tensor::ones({2}).requires_grad_();
  Tensor loss = sum(exp(x));
  loss.backward();
  CHECK_THROWS_WITH(trace_graph(loss), Contains("backward() already freed the graph through 'sum'"));
  CHECK_THROWS_WITH(trace_graph(Tensor::ones({2})), Contains("trace_graph: the tensor has no recorded graph"));
}
