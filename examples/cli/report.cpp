// qkv plot: a --log file (CSV or JSON lines) as an HTML page of SVG charts,
// one per logged quantity against the step. No Python, no plotting library:
// SVG written as text. Each chart keeps its points as data attributes, so
// tests (and users) can read the numbers back.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "heatmaps.h"
#include "io/output.h"
#include "nn/checkpoint.h"
#include "nn/metadata.h"

namespace qkv::cli {

namespace {

constexpr int64_t kMaxLogBytes = int64_t{256} << 20;

// One logged quantity: its points in step order, the text as logged kept too.
struct Series {
  std::vector<double> steps, values;
  std::vector<std::string> text;
};

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, sep)) out.push_back(field);
  if (!line.empty() && line.back() == sep) out.push_back("");
  return out;
}

// Columns of a log: name -> series. CSV has a header line; JSON lines are objects.
std::map<std::string, Series> parse_log(const std::string& path, const std::string& text) {
  std::map<std::string, Series> series;
  std::istringstream lines(text);
  std::string line, shown = printable(path);
  std::vector<std::string> header;
  bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  int64_t number = 0;
  auto add = [&](const std::string& name, double step, const std::string& value) {
    if (name == "step" || value.empty() || value == "null") return;
    Series& s = series[name];
    s.steps.push_back(step);
    s.values.push_back(nn::parse_number(value, cat(shown, " line ", number, ": ", printable(name))));
    s.text.push_back(value);
  };
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    if (csv) {
      std::vector<std::string> fields = split(line, ',');
      if (header.empty()) {
        header = fields;
        QKV_CHECK(!header.empty() && header[0] == "step", shown, ": not a qkv CSV log (no step column first)");
        continue;
      }
      QKV_CHECK(fields.size() == header.size(), shown, " line ", number, ": ", fields.size(), " fields, the header has ", header.size());
      double step = nn::parse_number(fields[0], cat(shown, " line ", number, ": step"));
      for (size_t i = 1; i < fields.size(); ++i) add(header[i], step, fields[i]);
    } else {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw Error(cat(shown, " line ", number, ": not JSON (a log is CSV if its name ends in .csv, else JSON lines)"));
      }
      QKV_CHECK(j.is_object() && j.contains("step") && j["step"].is_number(), shown, " line ", number, ": no step");
      double step = j["step"].get<double>();
      for (const auto& [name, v] : j.items())
        if (v.is_number()) add(name, step, nn::exact_number(v.get<double>()));
    }
  }
  QKV_CHECK(!series.empty(), shown, ": no logged values");
  return series;
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// One line chart; a log scale where the values span more than 100x and are positive.
std::string chart(const std::string& name, const std::string& title, const Series& s) {
  const int width = 640, height = 220, left = 64, right = 16, top = 28, bottom = 32;
  double x0 = *std::min_element(s.steps.begin(), s.steps.end()), x1 = *std::max_element(s.steps.begin(), s.steps.end());
  double y0 = *std::min_element(s.values.begin(), s.values.end()), y1 = *std::max_element(s.values.begin(), s.values.end());
  bool log_scale = y0 > 0 && y1 / y0 > 100;
  auto fy = [&](double v) { return log_scale ? std::log10(v) : v; };
  double a = fy(y0), b = fy(y1);
  if (b - a < 1e-12) a -= 0.5, b += 0.5;
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (width - left - right); };
  auto py = [&](double v) { return top + (b - fy(v)) / (b - a) * (height - top - bottom); };
  std::string points, steps, values;
  for (size_t i = 0; i < s.steps.size(); ++i) {
    char xy[64];
    std::snprintf(xy, sizeof xy, "%.1f,%.1f ", px(s.steps[i]), py(s.values[i]));
    points += xy;
    steps += (i ? " " : "") + nn::exact_number(s.steps[i]);
    values += (i ? " " : "") + s.text[i];
  }
  std::string svg = cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", height,
                        "\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"", left, "\" y=\"16\" font-weight=\"bold\">",
                        xml_text(title), log_scale ? " (log scale)" : "", "</text>\n");
  svg += cat("<line x1=\"", left, "\" y1=\"", height - bottom, "\" x2=\"", width - right, "\" y2=\"", height - bottom,
             "\" stroke=\"#999\"/><line x1=\"", left, "\" y1=\"", top, "\" x2=\"", left, "\" y2=\"", height - bottom,
             "\" stroke=\"#999\"/>\n");
  svg += cat("<text x=\"", left - 4, "\" y=\"", top + 4, "\" text-anchor=\"end\">", number_text(y1), "</text><text x=\"",
             left - 4, "\" y=\"", height - bottom, "\" text-anchor=\"end\">", number_text(y0), "</text>\n");
  svg += cat("<text x=\"", left, "\" y=\"", height - 12, "\">step ", number_text(x0), "</text><text x=\"", width - right,
             "\" y=\"", height - 12, "\" text-anchor=\"end\">", number_text(x1), "</text>\n");
  svg += cat("<polyline class=\"series\" data-name=\"", xml_text(name), "\" data-steps=\"", steps, "\" data-values=\"",
             xml_text(values), "\" points=\"", points, "\" fill=\"none\" stroke=\"#2a5db0\" stroke-width=\"1.5\"/>\n");
  if (s.steps.size() <= 200)  // evaluations and short runs: a dot per point, hover for its value
    for (size_t i = 0; i < s.steps.size(); ++i)
      svg += cat("<circle cx=\"", px(s.steps[i]), "\" cy=\"", py(s.values[i]), "\" r=\"2.5\" fill=\"#2a5db0\"><title>step ",
                 nn::exact_number(s.steps[i]), ": ", xml_text(s.text[i]), "</title></circle>");
  return svg + "\n</svg>\n";
}

}  // namespace

int plot(int argc, char** argv) {
  cxxopts::Options options("qkv plot", "A --log file (CSV or JSON lines) as an HTML page of charts against the step.");
  options.add_options()("log", "the log file qkv train --log wrote", cxxopts::value<std::string>(), "FILE")(
      "out", "the HTML file (default: the log's name with .html)", cxxopts::value<std::string>(), "FILE")(
      "force", "replace an existing --out")("h,help", "show this help");
  options.parse_positional({"log"});
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  QKV_CHECK(args.unmatched().empty(), "unexpected argument '", printable(args.unmatched()[0]), "'");
  QKV_CHECK(args.count("log"), "give the log file: qkv plot FILE");
  std::string path = args["log"].as<std::string>();
  std::string out = args.count("out") ? args["out"].as<std::string>() : path + ".html";
  io::check_output_file(out, "--out", args.count("force") > 0, {path});  // before reading: nothing is lost
  auto series = parse_log(path, nn::read_regular_file(path, kMaxLogBytes, "log"));
  // The charts in the order a reader asks: is it learning, is it generalising, is it healthy, is it fast.
  const std::vector<std::pair<std::string, std::string>> order{
      {"loss", "training loss (each step)"}, {"eval_loss", "held-out loss (nats/byte)"},
      {"eval_accuracy", "held-out exact match"}, {"lr", "learning rate"}, {"grad_norm", "gradient norm (before clipping)"},
      {"attn_entropy", "mean attention entropy"}, {"tokens_per_s", "tokens per second"}};
  std::string html = cat("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\"><head><meta charset=\"utf-8\"/>"
                         "<title>qkv training report</title><style>body{font-family:sans-serif}</style></head><body>\n"
                         "<h1>", xml_text(path), "</h1>\n");
  int charts = 0;
  std::vector<std::string> drawn;
  for (const auto& [name, title] : order)
    if (series.count(name)) html += chart(name, title, series.at(name)), ++charts, drawn.push_back(name);
  for (const auto& [name, s] : series)  // anything else the log holds (per-layer norms, ...)
    if (std::find(drawn.begin(), drawn.end(), name) == drawn.end()) html += chart(name, name, s), ++charts;
  html += "</body></html>\n";
  io::write_file(out, html);
  std::printf("wrote %d charts (%zu steps) to %s\n", charts, series.count("loss") ? series.at("loss").steps.size() : size_t{0},
              printable(out).c_str());
  return 0;
}

}  // namespace qkv::cli
