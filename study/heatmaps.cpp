#include "study/heatmaps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "autograd/error.h"

namespace qkv::study {

std::string xml_text(std::string_view text, size_t limit) {
  // printable() leaves valid UTF-8 and escapes the rest (and control bytes);
  // then XML's own specials.
  std::string safe = printable(text, limit), out;
  for (size_t i = 0; i < safe.size(); ++i) {
    char c = safe[i];
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else if (c == '\'')
      out += "&apos;";
    else if (static_cast<unsigned char>(c) == 0xef && i + 2 < safe.size() &&
             static_cast<unsigned char>(safe[i + 1]) == 0xbf &&
             (static_cast<unsigned char>(safe[i + 2]) == 0xbe || static_cast<unsigned char>(safe[i + 2]) == 0xbf)) {
      out += static_cast<unsigned char>(safe[i + 2]) == 0xbe ? "\\uFFFE" : "\\uFFFF";  // not allowed in XML 1.0
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

namespace {
// White (0) to deep blue (1). NaN is white: no NaN or infinity is ever cast to an integer.
std::string shade(double w) {
  double clamped = w > 0 ? (w < 1 ? w : 1.0) : 0.0;
  int s = 255 - static_cast<int>(clamped * 255);
  return cat("rgb(", s, ",", s, ",255)");
}
std::string fixed(double v, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}
}  // namespace

std::string heatmap_svg(const std::vector<double>& w, int64_t rows, int64_t cols,
                        const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                        const std::string& title, int64_t split, const std::vector<bool>& masked) {
  const int cell = 26, left = 70, top = 76, bar = 14;
  auto label = [](const std::string& t) { return xml_text(t == " " ? "\u2423" : t); };  // a space shows as ␣
  // Wide enough for the title (monospace 12 px: about 7.3 px a character) and the
  // 38-character hint line (10 px), tall enough for the colour bar of a short map.
  int64_t title_chars = 0;
  for (unsigned char c : title) title_chars += (c & 0xc0) != 0x80;
  const int width =
      std::max({left + cell * static_cast<int>(cols) + 70, 12 + static_cast<int>(title_chars * 15 / 2), 270});
  const int height = top + std::max(cell * static_cast<int>(rows), 60) + 16;
  std::string svg = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", height,
                        "\" font-family=\"monospace\" font-size=\"12\">\n<text x=\"4\" y=\"16\" font-weight=\"bold\">",
                        xml_text(title),
                        "</text>\n<text x=\"4\" y=\"30\" font-size=\"10\">rows: queries, columns: keys; "
                        "hover a cell</text>\n");
  if (!masked.empty())
    svg +=
        "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
        "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f0f0f0\"/><line x1=\"0\" y1=\"0\" "
        "x2=\"0\" y2=\"6\" stroke=\"#bbb\" stroke-width=\"2\"/></pattern></defs>\n";
  for (int64_t j = 0; j < cols; ++j) {  // key labels and positions
    int x = left + cell * static_cast<int>(j) + cell / 2;
    svg += cat("<text x=\"", x, "\" y=\"", top - 20, "\" text-anchor=\"middle\">", label(col_labels[j]), "</text>",
               "<text x=\"", x, "\" y=\"", top - 6, "\" text-anchor=\"middle\" font-size=\"9\" fill=\"#888\">", j,
               "</text>\n");
  }
  for (int64_t i = 0; i < rows; ++i) {
    int y = top + cell * static_cast<int>(i);
    svg += cat("<text x=\"", left - 22, "\" y=\"", y + cell / 2 + 4, "\" text-anchor=\"end\">", label(row_labels[i]),
               "</text><text x=\"", left - 6, "\" y=\"", y + cell / 2 + 4,
               "\" text-anchor=\"end\" font-size=\"9\" fill=\"#888\">", i, "</text>\n");
    for (int64_t j = 0; j < cols; ++j) {
      double v = w[i * cols + j];
      const bool hidden = !masked.empty() && masked[i * cols + j];
      svg += cat("<rect x=\"", left + cell * j, "\" y=\"", y, "\" width=\"", cell, "\" height=\"", cell, "\" fill=\"",
                 hidden ? std::string("url(#hatch)") : shade(v), "\" stroke=\"#ddd\"><title>query ", i, " ",
                 label(row_labels[i]), " -> key ", j, " ", label(col_labels[j]), ": ",
                 hidden ? std::string("masked (the query cannot see this key)") : fixed(v, 4), "</title></rect>\n");
    }
  }
  if (split > 0 && split < std::max(rows, cols)) {  // where the answer starts
    int at = left + cell * static_cast<int>(split), y_at = top + cell * static_cast<int>(split);
    svg += cat("<line x1=\"", at, "\" y1=\"", top - 4, "\" x2=\"", at, "\" y2=\"", top + cell * rows,
               "\" stroke=\"#d33\" stroke-width=\"2\"><title>answer starts</title></line>\n");
    svg += cat("<line x1=\"", left - 4, "\" y1=\"", y_at, "\" x2=\"", left + cell * cols, "\" y2=\"", y_at,
               "\" stroke=\"#d33\" stroke-width=\"2\"><title>answer starts</title></line>\n");
  }
  // Colour bar: 0 at the bottom, 1 at the top.
  int bx = left + cell * static_cast<int>(cols) + 16, bh = std::max(60, cell * static_cast<int>(rows));
  for (int k = 0; k < 10; ++k)
    svg += cat("<rect x=\"", bx, "\" y=\"", top + bh * k / 10, "\" width=\"", bar, "\" height=\"", bh / 10 + 1,
               "\" fill=\"", shade(1.0 - k / 10.0 - 0.05), "\"/>");
  svg += cat("\n<text x=\"", bx + bar + 4, "\" y=\"", top + 10, "\" font-size=\"10\">1</text><text x=\"", bx + bar + 4,
             "\" y=\"", top + bh, "\" font-size=\"10\">0</text>\n");
  return svg + "</svg>\n";
}

namespace {
// Red at a weight's share of the largest: the tint over a patch or a token.
std::string tint(double w, double top) {
  double share = top > 0 && w > 0 ? std::min(1.0, w / top) : 0.0;
  return cat("fill=\"#d62728\" fill-opacity=\"", fixed(0.85 * share, 3), "\"");
}
}  // namespace

std::string patch_overlay_svg(const std::vector<double>& image, int64_t side, int64_t patch,
                              const std::vector<double>& patch_weights, double cls_weight, const std::string& title) {
  const int px = 24, left = 8, top = 40, per_row = static_cast<int>(side / patch);
  const int size = px * static_cast<int>(side);
  double largest = 0;
  for (double w : patch_weights) largest = std::max(largest, w);
  std::string svg = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", std::max(size + 2 * left, 330),
                        "\" height=\"", top + size + 24, "\" font-family=\"monospace\" font-size=\"12\">\n",
                        "<text x=\"4\" y=\"16\" font-weight=\"bold\">", xml_text(title), "</text>\n",
                        "<text x=\"4\" y=\"30\" font-size=\"10\">red: [CLS]'s weight on a patch (hover)</text>\n");
  for (int64_t r = 0; r < side; ++r)  // the image, dark ink on white
    for (int64_t c = 0; c < side; ++c) {
      double v = std::clamp(image[r * side + c], 0.0, 1.0);  // NaN-free: pixels come from a checked file
      int g = 255 - static_cast<int>(v * 255);
      svg += cat("<rect x=\"", left + px * c, "\" y=\"", top + px * r, "\" width=\"", px, "\" height=\"", px,
                 "\" fill=\"rgb(", g, ",", g, ",", g, ")\"/>");
    }
  svg += "\n";
  for (int k = 0; k < per_row * per_row; ++k) {  // the patches, tinted, with the grid
    int x = left + px * static_cast<int>(patch) * (k % per_row), y = top + px * static_cast<int>(patch) * (k / per_row);
    int s = px * static_cast<int>(patch);
    double w = patch_weights[k];
    svg += cat("<rect x=\"", x, "\" y=\"", y, "\" width=\"", s, "\" height=\"", s, "\" ", tint(w, largest),
               " stroke=\"#1f77b4\" stroke-width=\"1\"><title>patch ", k, " (row ", k / per_row, ", column ",
               k % per_row, "): ", fixed(std::isfinite(w) ? w : 0.0, 4), "</title></rect>\n");
  }
  svg += cat("<text x=\"4\" y=\"", top + size + 16, "\" font-size=\"10\">[CLS] keeps ",
             fixed(std::isfinite(cls_weight) ? cls_weight : 0.0, 3), " on itself; darkest red ", fixed(largest, 3),
             "</text>\n");
  return svg + "</svg>\n";
}

std::string cls_row_svg(const std::vector<std::string>& tokens, const std::vector<double>& weights,
                        const std::string& title) {
  const int box = 28, left = 8, top = 40;
  double largest = 0;
  for (double w : weights) largest = std::max(largest, w);
  const int n = static_cast<int>(tokens.size());
  std::string svg = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", std::max(left * 2 + box * n, 260),
                        "\" height=\"", top + box + 30, "\" font-family=\"monospace\" font-size=\"13\">\n",
                        "<text x=\"4\" y=\"16\" font-weight=\"bold\">", xml_text(title), "</text>\n",
                        "<text x=\"4\" y=\"30\" font-size=\"10\">red: [CLS]'s weight on each token (hover)</text>\n");
  for (int i = 0; i < n; ++i) {
    double w = std::isfinite(weights[i]) ? weights[i] : 0.0;
    int x = left + box * i;
    svg += cat("<rect x=\"", x, "\" y=\"", top, "\" width=\"", box, "\" height=\"", box, "\" ", tint(w, largest),
               " stroke=\"#999\"><title>[CLS] -> ", i, " ", xml_text(tokens[i]), ": ", fixed(w, 4),
               "</title></rect><text x=\"", x + box / 2, "\" y=\"", top + box / 2 + 5, "\" text-anchor=\"middle\">",
               xml_text(tokens[i]), "</text><text x=\"", x + box / 2, "\" y=\"", top + box + 12,
               "\" text-anchor=\"middle\" font-size=\"9\" fill=\"#888\">", i, "</text>\n");
  }
  return svg + "</svg>\n";
}

}  // namespace qkv::study
