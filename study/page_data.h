// The page's data, view by view, as JSON (nlohmann-json: internal to the
// library and the program, not a public header). study/page.h lays a whole
// Study out with these; qkv plot writes the curves alone, qkv attention the
// attention alone. A self-contained HTML file (its data as JSON, its script
// and Debian's dygraphs and dagre inlined) that works offline, with no server.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/graph_dot.h"
#include "study/study.h"

namespace qkv::study {

/// The HTML page for `data`: "title" and "subtitle" (strings) and any of the
/// views' data: "attention" (attention_json), "graph" (explore.cpp) and
/// "curves" (curves_json). Nothing in `data` can end the script it sits in.
std::string page_html(const nlohmann::json& data);

/// A number for the page: 4 significant digits (it shows at most 4), null when not finite.
nlohmann::json page_number(double v);

/// A token as the page shows it: valid UTF-8 kept, other bytes as escapes
/// (the page marks spaces and line breaks itself).
std::string page_token(const std::string& text);

/// At most this many attention weights on a page (maps x heads x queries x
/// keys): with their gradients, 2.7 bytes a visible cell, so at worst a page
/// of about 11 MB (docs/commands.md: "How big a page grows").
constexpr int64_t kPageCells = int64_t{1} << 22;

/// Throws unless the maps fit on a page (kPageCells), naming the longest
/// prompt, in tokens, that fits this model.
void check_page_size(const std::vector<AttentionMap>& maps);

/// The attention views' data: maps grouped into tabs (a Seq2Seq's encoder
/// self-, decoder self- and cross-attention; one tab for the other kinds),
/// each layer's heads as "maps", which cells a mask hides, and, when the
/// maps come from a Study whose backward has run, dL/dP and each head's
/// importance. Each head's visible cells (row-major, masked ones left out)
/// are one byte each that colours them (weight_codes, gradient_codes, as
/// base64) and, for the most important heads while 384 KiB lasts, float32
/// values for the hover. `window` > 0: self-attention sees only that band.
nlohmann::json attention_json(const std::vector<AttentionMap>& maps, int64_t window, bool with_gradients);

/// Each map's Σ P ⊙ dL/dP per head (nn::head_gate_gradient); throws unless
/// the maps' backward has run.
std::vector<std::vector<double>> head_gates(const std::vector<AttentionMap>& maps);

/// Every (map index, head), the most important first (|gate|, from
/// head_gates), or in order when `gates` is empty.
std::vector<std::pair<size_t, int64_t>> heads_by_importance(const std::vector<AttentionMap>& maps,
                                                            const std::vector<std::vector<double>>& gates);

/// Bytes as base64 (RFC 4648, padded), as the page's atob() reads them.
std::string base64(const std::vector<uint8_t>& bytes);
/// Values as float32 bytes in base64, as the page's Float32Array reads them.
std::string float32_base64(const std::vector<double>& values);
/// Weights in [0, top] as bytes: code c < 255 stands for top·(c/254)², 255 for not finite.
std::vector<uint8_t> weight_codes(const std::vector<double>& values, double top);
/// Gradients in [−top, top] as bytes: c < 255 stands for sign(c − 127)·top·((c − 127)/127)², 255 for not finite.
std::vector<uint8_t> gradient_codes(const std::vector<double>& values, double top);

/// A classifier's [CLS] row on its own, per head and averaged: over the
/// image's patches for a ViT, over the tokens otherwise. Hands each SVG to
/// `write` (a file name, the SVG) and returns them all as one HTML fragment.
std::string cls_views(const AttentionMap& map, int64_t heads,
                      const std::function<void(const std::string&, const std::string&)>& write);

/// The cells of a map its model's masks hide (the causal triangle, a
/// window's band in self-attention), row-major; empty where none are.
std::vector<bool> masked_cells(const AttentionMap& map, int64_t window);

/// The graph view's data: `graph`'s nodes in data-flow order with their
/// module, op (engine and readable names), shape and |grad|; and every
/// parameter that has no gradient path, with the reason. `causal_model`:
/// the model's self-attention is causal (readable_op).
nlohmann::json graph_json(const Graph& graph, const std::vector<std::pair<std::string, Tensor>>& params,
                          bool causal_model);

/// Per attention module and head, the gradient norm of its q, k, v and
/// out projections (parameters named *.q_proj.weight and so on).
nlohmann::json projections_json(const std::vector<std::pair<std::string, Tensor>>& params, int64_t heads);

/// The curves of one or more --log files (qkv plot's parser): per run, each
/// column's steps and values, thinned to a bounded number of points.
nlohmann::json curves_json(const std::vector<std::string>& log_paths);

}  // namespace qkv::study
