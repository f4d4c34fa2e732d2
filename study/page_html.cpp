// The page's HTML (page_data.h): data as JSON, then the inlined libraries
// and study/page/explore.js, which draws every view.
#include "study/page_data.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "study/heatmaps.h"

namespace qkv::study {

namespace assets {  // the files cmake/embed_files.cmake inlined into the library
extern const char page_js[], page_css[], dygraphs_js[], dygraphs_css[], dagre_js[];
}  // namespace assets

namespace {

// A script or style element ends at "</script" or "</style" (any case), and
// nowhere else: written "<\/..." there, which means the same in JavaScript
// strings and regular expressions (the libraries hold none anyway).
std::string inside_element(std::string_view text, std::string_view tag) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] != '<' || i + 1 + tag.size() >= text.size() || text[i + 1] != '/') continue;
    bool match = true;
    for (size_t k = 0; k < tag.size() && match; ++k)
      match = std::tolower(static_cast<unsigned char>(text[i + 2 + k])) == tag[k];
    if (match) out += '\\';
  }
  return out;
}

// JSON inside a script element: every '<' (only ever inside a string) as \u003c,
// so that neither "</script" nor "<!--" can appear.
std::string json_inside_script(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) out += c == '<' ? std::string("\\u003c") : std::string(1, c);
  return out;
}

std::string html_text(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

}  // namespace

// A classifier's [CLS] row on its own, per head and averaged: over the
// image's patches for a ViT, over the tokens otherwise. Writes the SVGs and
// returns them for the page.
std::string cls_views(const AttentionMap& map, int64_t heads,
                      const std::function<void(const std::string&, const std::string&)>& write) {
  const int64_t cols = static_cast<int64_t>(map.cols.size()), rows = static_cast<int64_t>(map.rows.size());
  std::vector<double> all = map.weights.to_vector(), mean(cols, 0.0);
  std::string html = cat("<h3>", xml_text(map.name), ": what [CLS] attends to",
                         map.image.empty() ? "" : ", over the image", "</h3>\n<div class=\"maps\">\n");
  for (int64_t h = 0; h <= heads; ++h) {
    const bool average = h == heads;
    std::vector<double> row(cols);
    for (int64_t j = 0; j < cols; ++j) {
      row[j] = average ? mean[j] : all[h * rows * cols + j];  // row 0: the [CLS] query
      if (!average) mean[j] += row[j] / static_cast<double>(heads);
    }
    std::string title = average ? cat(map.name, ", mean of ", heads, " heads") : cat(map.name, ", head ", h);
    std::string svg = map.image.empty()
                          ? cls_row_svg(map.cols, row, title)
                          : patch_overlay_svg(map.image, map.image_side, map.patch,
                                              std::vector<double>(row.begin() + 1, row.end()), row[0], title);
    write(average ? cat(map.file, "_cls_mean.svg") : cat(map.file, "_cls_head", h, ".svg"), svg);
    html += svg;
  }
  return html + "</div>\n";
}

nlohmann::json page_number(double v) {
  if (!std::isfinite(v)) return nullptr;
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return std::stod(text);
}

std::string page_token(const std::string& text) { return printable(text, 64); }

std::string page_html(const nlohmann::json& data) {
  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string title = data.contains("title") ? data["title"].get<std::string>() : "qkv";
  return cat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\n<title>", html_text(title),
      "</title>\n<meta name=\"generator\" content=\"qkv\"/>\n<style>\n", inside_element(assets::dygraphs_css, "style"),
      "\n", inside_element(assets::page_css, "style"), "</style></head>\n<body>\n<div id=\"app\"></div>\n",
      "<script id=\"qkv-data\" type=\"application/json\">", json_inside_script(json), "</script>\n",
      "<script>/* dygraphs 2.2 (MIT), from Debian's libjs-dygraphs */\n", inside_element(assets::dygraphs_js, "script"),
      "</script>\n<script>/* dagre (MIT), from Debian's python3-xstatic-dagre */\n",
      inside_element(assets::dagre_js, "script"), "</script>\n<script>\n", inside_element(assets::page_js, "script"),
      "</script>\n</body></html>\n");
}

}  // namespace qkv::study
