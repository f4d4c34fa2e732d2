// The graph view's data (the autograd graph of a study's forward and
// backward) and the gradient norms of each head's projections.
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "study/op_names.h"
#include "study/page_data.h"

namespace qkv::study {

// The graph view's data: nodes in data-flow order with their module, op
// (engine and readable names), shape and |grad|; and every parameter that
// has no gradient path, with the reason.
nlohmann::json graph_json(const Graph& graph, const std::vector<std::pair<std::string, Tensor>>& params,
                          bool causal_model) {
  nlohmann::json nodes = nlohmann::json::array();
  std::set<std::string> reached;
  for (const GraphNode& n : graph.nodes) {
    nlohmann::json shape = nlohmann::json::array();
    for (int64_t d : n.tensor.shape()) shape.push_back(d);
    std::optional<double> grad = n.grad_norm();
    nlohmann::json node{
        {"op", n.op},        {"label", n.op.empty() ? n.label() : readable_op(n.op, n.scope, causal_model)},
        {"scope", n.scope},  {"name", n.name},
        {"shape", shape},    {"grad", grad ? page_number(*grad) : nlohmann::json(nullptr)},
        {"inputs", n.inputs}};
    nodes.push_back(std::move(node));
    if (!n.name.empty()) reached.insert(n.name);
  }
  nlohmann::json no_grad = nlohmann::json::array();
  for (const auto& [name, p] : params) {
    if (reached.count(name)) continue;
    bool key_bias = name.size() >= 11 && name.compare(name.size() - 11, 11, "k_proj.bias") == 0;
    no_grad.push_back(
        {{"name", name},
         {"why", key_bias
                     ? "The key bias b_k adds q·b_k to every score in a query's row: the same number for every key. "
                       "Softmax ignores a constant added to a whole row, so the loss does not depend on b_k and "
                       "its gradient is exactly zero. qkv detaches it and returns that zero; computed, as PyTorch "
                       "does, it is rounding noise."
                     : "This forward never reads it (another input or task uses it), so it has no gradient here."}});
  }
  return {{"nodes", nodes}, {"no_grad", no_grad}};
}

// Per attention module and head, the gradient norm of its q, k and v
// projections (head h owns rows [h·d, (h+1)·d) of each weight and those
// entries of its bias) and of out_proj (input columns [h·d, (h+1)·d); its
// bias belongs to no head).
nlohmann::json projections_json(const std::vector<std::pair<std::string, Tensor>>& params, int64_t heads) {
  std::map<std::string, nlohmann::json> modules;
  std::vector<std::string> order;
  for (const auto& [name, p] : params) {
    size_t dot = name.rfind('.'), proj = name.rfind('.', dot == std::string::npos ? 0 : dot - 1);
    if (dot == std::string::npos || proj == std::string::npos) continue;
    std::string which = name.substr(proj + 1, dot - proj - 1), part = name.substr(dot + 1),
                module = name.substr(0, proj);
    if (which != "q_proj" && which != "k_proj" && which != "v_proj" && which != "out_proj") continue;
    if (which == "out_proj" && part == "bias") continue;
    if (!modules.count(module)) {
      order.push_back(module);
      modules[module] = {{"module", module}};
      for (const char* k : {"q", "k", "v", "out"}) modules[module][k] = std::vector<double>(heads, 0.0);
    }
    std::vector<double> g = p.grad().defined() ? p.grad().to_vector() : std::vector<double>(p.numel(), 0.0);
    const int64_t rows = p.size(0), cols = p.dim() == 2 ? p.size(1) : 1, d = rows / heads;
    std::string key = which.substr(0, which.size() - 5);
    nlohmann::json& sums = modules[module][key];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        int64_t h = which == "out_proj" ? c / (cols / heads) : r / d;
        sums[h] = sums[h].get<double>() + g[r * cols + c] * g[r * cols + c];
      }
  }
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& m : order) {
    nlohmann::json entry = modules[m];
    for (const char* k : {"q", "k", "v", "out"})
      for (auto& v : entry[k]) v = page_number(std::sqrt(v.get<double>()));
    out.push_back(entry);
  }
  return out;
}

}  // namespace qkv::study
