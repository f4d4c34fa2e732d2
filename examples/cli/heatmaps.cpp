#include "heatmaps.h"

#include <algorithm>
#include <cstdio>

#include "autograd/error.h"

namespace qkv::cli {

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
                        const std::string& title, int64_t split) {
  const int cell = 26, left = 70, top = 76, bar = 14;
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
  for (int64_t j = 0; j < cols; ++j) {  // key labels and positions
    int x = left + cell * static_cast<int>(j) + cell / 2;
    svg += cat("<text x=\"", x, "\" y=\"", top - 20, "\" text-anchor=\"middle\">", xml_text(col_labels[j]), "</text>",
               "<text x=\"", x, "\" y=\"", top - 6, "\" text-anchor=\"middle\" font-size=\"9\" fill=\"#888\">", j,
               "</text>\n");
  }
  for (int64_t i = 0; i < rows; ++i) {
    int y = top + cell * static_cast<int>(i);
    svg += cat("<text x=\"", left - 22, "\" y=\"", y + cell / 2 + 4, "\" text-anchor=\"end\">", xml_text(row_labels[i]),
               "</text><text x=\"", left - 6, "\" y=\"", y + cell / 2 + 4,
               "\" text-anchor=\"end\" font-size=\"9\" fill=\"#888\">", i, "</text>\n");
    for (int64_t j = 0; j < cols; ++j) {
      double v = w[i * cols + j];
      svg += cat("<rect x=\"", left + cell * j, "\" y=\"", y, "\" width=\"", cell, "\" height=\"", cell, "\" fill=\"",
                 shade(v), "\" stroke=\"#ddd\"><title>query ", i, " ", xml_text(row_labels[i]), " -> key ", j, " ",
                 xml_text(col_labels[j]), ": ", fixed(v, 4), "</title></rect>\n");
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

}  // namespace qkv::cli
