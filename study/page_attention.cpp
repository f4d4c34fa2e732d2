// The attention views' data (page.h): maps grouped into tabs, each map's
// visible cells as one byte each that colours the cell, and as float32 for
// the hover where the page's budget allows, most important heads first.
// Sizes: docs/commands.md ("How big a page grows").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "nn/attention.h"
#include "study/page_data.h"

namespace qkv::study {

namespace {

// A map's tab, from its file stem without the layer's number: "layer",
// "encoder", "decoder_self", "decoder_cross"; and which sequence its rows
// and columns hold (a token is the same token in every view that shows it).
struct Group {
  std::string name, row_seq, col_seq;
};
Group group_of(const AttentionMap& m) {
  std::string stem;
  for (char c : m.file)
    if (c < '0' || c > '9') stem += c;
  if (stem == "encoder") return {"encoder self-attention", "src", "src"};
  if (stem == "decoder_self") return {"decoder self-attention", "tgt", "tgt"};
  if (stem == "decoder_cross") return {"cross-attention (decoder to input)", "tgt", "src"};
  return {"self-attention", "in", "in"};
}

double largest_finite(const std::vector<double>& v) {
  double top = 0;
  for (double x : v)
    if (std::isfinite(x)) top = std::max(top, std::fabs(x));
  return top;
}

// One head's map: its visible cells, row-major.
std::vector<double> visible_cells(const std::vector<double>& all, int64_t head, int64_t cells,
                                  const std::vector<bool>& hidden) {
  std::vector<double> out;
  out.reserve(cells);
  for (int64_t c = 0; c < cells; ++c)
    if (hidden.empty() || !hidden[c]) out.push_back(all[head * cells + c]);
  return out;
}

// Float32 values cost 4 bytes a visible cell (5.3 as base64): maps get them, most important first, up to
// this many bytes (the neuron view has a budget of its own, study/neurons.cpp). A 12 x 12 model on 128
// tokens makes a page of about 4.6 MB (docs/commands.md).
constexpr size_t kExactBudget = size_t{3} << 17;

}  // namespace

std::vector<std::vector<double>> head_gates(const std::vector<AttentionMap>& maps) {
  std::vector<std::vector<double>> gates;
  for (const AttentionMap& m : maps) {
    Tensor grad = m.weights.grad();
    QKV_CHECK(grad.defined(), "the page's maps: ", m.name, " has no gradient (run backward() on the study's loss)");
    gates.push_back(nn::head_gate_gradient(m.weights, grad));
  }
  return gates;
}

// Every (map, head), the most important first (|Σ P ⊙ dL/dP|), else in order.
std::vector<std::pair<size_t, int64_t>> heads_by_importance(const std::vector<AttentionMap>& maps,
                                                            const std::vector<std::vector<double>>& gates) {
  const int64_t heads = maps.empty() ? 0 : maps.front().weights.size(-3);
  std::vector<std::pair<size_t, int64_t>> order;
  std::vector<double> importance;
  for (size_t k = 0; k < maps.size(); ++k)
    for (int64_t h = 0; h < heads; ++h) {
      const double gate = gates.empty() ? 0.0 : gates[k][h];
      order.emplace_back(k, h), importance.push_back(std::isfinite(gate) ? std::fabs(gate) : 0.0);
    }
  std::vector<size_t> index(order.size());
  std::iota(index.begin(), index.end(), size_t{0});
  std::stable_sort(index.begin(), index.end(), [&](size_t a, size_t b) { return importance[a] > importance[b]; });
  std::vector<std::pair<size_t, int64_t>> sorted;
  for (size_t i : index) sorted.push_back(order[i]);
  return sorted;
}

std::string base64(const std::vector<uint8_t>& bytes) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = static_cast<uint32_t>(bytes[i]) << 16 | (i + 1 < bytes.size() ? bytes[i + 1] << 8 : 0) |
                       (i + 2 < bytes.size() ? bytes[i + 2] : 0);
    out += digits[n >> 18 & 63];
    out += digits[n >> 12 & 63];
    out += i + 1 < bytes.size() ? digits[n >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? digits[n & 63] : '=';
  }
  return out;
}

// Little-endian, as x86-64 and ARM64 are, which is what the page's Float32Array reads.
std::string float32_base64(const std::vector<double>& values) {
  std::vector<float> f(values.begin(), values.end());
  std::vector<uint8_t> bytes(f.size() * sizeof(float));
  if (!f.empty()) std::memcpy(bytes.data(), f.data(), bytes.size());
  return base64(bytes);
}

// Code c < 255 stands for top·(c/254)² (steps finer near 0, where most weights lie); 255: not finite.
std::vector<uint8_t> weight_codes(const std::vector<double>& values, double top) {
  std::vector<uint8_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    out[i] = !std::isfinite(v) ? 255
             : top > 0         ? static_cast<uint8_t>(std::lround(254 * std::sqrt(std::clamp(v / top, 0.0, 1.0))))
                               : 0;
  }
  return out;
}

// Code c < 255 stands for sign(c − 127)·top·((c − 127)/127)²; 127 is 0, 255 not finite.
std::vector<uint8_t> gradient_codes(const std::vector<double>& values, double top) {
  std::vector<uint8_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) {
      out[i] = 255;
      continue;
    }
    const double r = top > 0 ? std::sqrt(std::min(1.0, std::fabs(v) / top)) : 0;
    out[i] = static_cast<uint8_t>(127 + (v < 0 ? -1 : 1) * std::lround(127 * r));
  }
  return out;
}

void check_page_size(const std::vector<AttentionMap>& maps) {
  int64_t cells = 0, tokens = 0;
  for (const AttentionMap& m : maps) {
    cells += m.weights.numel();
    tokens = std::max<int64_t>(tokens, std::max(m.rows.size(), m.cols.size()));
  }
  if (cells <= kPageCells) return;
  // Cells grow with tokens²: the longest that fits, checked so that it does.
  auto fits = static_cast<int64_t>(static_cast<double>(tokens) * std::sqrt(double(kPageCells) / double(cells)));
  while (fits > 1 && static_cast<double>(cells) * fits * fits > static_cast<double>(kPageCells) * tokens * tokens)
    --fits;
  throw Error(cat("the page would hold ", cells,
                  " attention weights (maps x heads x queries x keys), over its bound of ", kPageCells,
                  ": this prompt gives ", tokens, " tokens, and the longest that fits this model gives ", fits,
                  ": give a shorter prompt"));
}

std::vector<bool> masked_cells(const AttentionMap& m, int64_t window) {
  const int64_t rows = static_cast<int64_t>(m.rows.size()), cols = static_cast<int64_t>(m.cols.size());
  const Group g = group_of(m);
  Tensor seen;
  if (window > 0 && g.row_seq == g.col_seq)
    seen = nn::window_mask(rows, cols, window, m.causal);
  else if (m.causal)
    seen = nn::causal_mask(rows, cols);
  if (!seen.defined()) return {};
  std::vector<double> v = seen.to(DType::Float64).to_vector();
  std::vector<bool> hidden(v.size());
  for (size_t k = 0; k < v.size(); ++k) hidden[k] = v[k] == 0;
  return hidden;
}

namespace {

nlohmann::json group_json(const AttentionMap& m, const Group& g, const std::vector<bool>& hidden) {
  const int64_t rows = static_cast<int64_t>(m.rows.size()), cols = static_cast<int64_t>(m.cols.size());
  nlohmann::json masked = nlohmann::json::array();
  if (!hidden.empty())
    for (int64_t r = 0; r < rows; ++r) {
      nlohmann::json row = nlohmann::json::array();
      for (int64_t c = 0; c < cols; ++c) row.push_back(hidden[r * cols + c] ? 1 : 0);
      masked.push_back(std::move(row));
    }
  nlohmann::json row_labels = nlohmann::json::array(), col_labels = nlohmann::json::array();
  for (const std::string& t : m.rows) row_labels.push_back(page_token(t));
  for (const std::string& t : m.cols) col_labels.push_back(page_token(t));
  return {{"name", g.name},           {"row_seq", g.row_seq}, {"col_seq", g.col_seq},
          {"rows", row_labels},       {"cols", col_labels},   {"split", m.split},
          {"cls_first", m.cls_first}, {"masked", masked},     {"layers", nlohmann::json::array()}};
}

// One head of one map: codes and their scales, and float32 values if `exact`.
nlohmann::json head_json(const std::vector<double>& p, const std::vector<double>* grad, bool exact) {
  const double p_top = largest_finite(p);
  nlohmann::json out{{"p", base64(weight_codes(p, p_top))}, {"p_top", p_top}};
  if (exact) out["p_exact"] = float32_base64(p);
  if (grad) {
    const double g_top = largest_finite(*grad);
    out["g"] = base64(gradient_codes(*grad, g_top));
    out["g_top"] = g_top;
    if (exact) out["g_exact"] = float32_base64(*grad);
  }
  return out;
}

}  // namespace

nlohmann::json attention_json(const std::vector<AttentionMap>& maps, int64_t window, bool with_gradients) {
  check_page_size(maps);
  const int64_t heads = maps.empty() ? 0 : maps.front().weights.size(-3);
  // Which heads get float32 values: by importance (with gradients) or in order, while the budget lasts.
  // Σ P ⊙ dL/dP per head (nn::head_gate_gradient): removing the head changes L by −that.
  const std::vector<std::vector<double>> gates = with_gradients ? head_gates(maps) : std::vector<std::vector<double>>{};
  const std::vector<std::pair<size_t, int64_t>> order = heads_by_importance(maps, gates);
  std::vector<std::vector<bool>> hidden_of;  // each map's masked cells
  std::vector<size_t> visible;               // and how many it shows
  for (const AttentionMap& m : maps) {
    hidden_of.push_back(masked_cells(m, window));
    const auto& h = hidden_of.back();
    visible.push_back(static_cast<size_t>(m.weights.numel() / heads) - std::count(h.begin(), h.end(), true));
  }
  std::set<std::pair<size_t, int64_t>> exact;  // the (map, head)s sent as float32 too
  size_t spent = 0;
  for (const auto& a : order) {
    const size_t cost = visible[a.first] * 4 * (with_gradients ? 2 : 1);
    if (spent + cost > kExactBudget) break;  // the rest keep their order: less important than these
    exact.insert(a), spent += cost;
  }

  nlohmann::json groups = nlohmann::json::array();
  std::map<std::string, size_t> index;  // group name -> its place in `groups`
  for (size_t k = 0; k < maps.size(); ++k) {
    const AttentionMap& m = maps[k];
    const Group g = group_of(m);
    const std::vector<bool>& hidden = hidden_of[k];
    if (!index.count(g.name)) index[g.name] = groups.size(), groups.push_back(group_json(m, g, hidden));
    const int64_t cells = m.weights.numel() / heads;
    const std::vector<double> p = m.weights.to_vector();
    const std::vector<double> grad = with_gradients ? m.weights.grad().to_vector() : std::vector<double>{};
    nlohmann::json layer{{"name", m.name}, {"map", k}, {"maps", nlohmann::json::array()}};
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> gh = with_gradients ? visible_cells(grad, h, cells, hidden) : std::vector<double>{};
      layer["maps"].push_back(
          head_json(visible_cells(p, h, cells, hidden), with_gradients ? &gh : nullptr, exact.count({k, h}) > 0));
    }
    if (with_gradients) {
      nlohmann::json gate = nlohmann::json::array(), imp = nlohmann::json::array();
      for (double v : gates[k]) gate.push_back(page_number(v)), imp.push_back(page_number(std::fabs(v)));
      layer["gate_grad"] = gate;
      layer["importance"] = imp;
    }
    groups[index[g.name]]["layers"].push_back(std::move(layer));
  }
  return {{"heads", heads}, {"groups", groups}, {"exact_maps", exact.size()}, {"maps_in_all", order.size()}};
}

}  // namespace qkv::study
