// The one page every picture command writes: qkv explore holds all its
// views, qkv plot the curves alone, qkv attention the attention alone. A
// self-contained HTML file (its data as JSON, its script and Debian's
// dygraphs and dagre inlined) that works offline, with no server.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_spec.h"
#include "study.h"

namespace qkv::cli {

/// The HTML page for `data`: "title" and "subtitle" (strings) and any of the
/// views' data: "attention" (attention_json), "graph" (explore.cpp) and
/// "curves" (curves_json). Nothing in `data` can end the script it sits in.
std::string page_html(const nlohmann::json& data);

/// A number for the page: 4 significant digits (it shows at most 4), null when not finite.
nlohmann::json page_number(double v);

/// A token as the page shows it: valid UTF-8 kept, other bytes as escapes
/// (the page marks spaces and line breaks itself).
std::string page_token(const std::string& text);

/// The attention views' data: maps grouped into tabs (a Seq2Seq's encoder
/// self-, decoder self- and cross-attention; one tab for the other kinds),
/// each layer's weights per head, which cells a mask hides, and, when the
/// maps come from a Study whose backward has run, dL/dP and each head's
/// importance. `window` > 0: self-attention sees only that band.
/// Throws unless the maps fit on a page: at most 2^20 attention weights in
/// all (each with its gradient, a page of tens of MB at worst).
void check_page_size(const std::vector<AttentionMap>& maps);

nlohmann::json attention_json(const std::vector<AttentionMap>& maps, int64_t window, bool with_gradients);

/// A classifier's [CLS] row on its own, per head and averaged: over the
/// image's patches for a ViT, over the tokens otherwise. Hands each SVG to
/// `write` (a file name, the SVG) and returns them all as one HTML fragment.
std::string cls_views(const AttentionMap& map, int64_t heads,
                      const std::function<void(const std::string&, const std::string&)>& write);

/// The window of a model's window:W attention, 0 for full attention.
int64_t attention_window(const ModelSpec& spec);

/// The cells of a map its model's masks hide (the causal triangle, a
/// window's band in self-attention), row-major; empty where none are.
std::vector<bool> masked_cells(const AttentionMap& map, int64_t window);

/// The curves of one or more --log files (qkv plot's parser): per run, each
/// column's steps and values, thinned to a bounded number of points.
nlohmann::json curves_json(const std::vector<std::string>& log_paths);

}  // namespace qkv::cli
