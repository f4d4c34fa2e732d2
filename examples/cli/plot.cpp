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
#include <iterator>
#include <map>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "heatmaps.h"
#include "io/metadata.h"
#include "io/output.h"
#include "nn/checkpoint.h"

namespace qkv::cli {

namespace {

constexpr int64_t kMaxLogBytes = int64_t{256} << 20;
// The page stays bounded whatever the log: a qkv log has about 2 columns per
// layer (at most ~520), so more is not one; each chart draws at most
// kMaxPoints points (every k-th, stated on the chart), and at most
// kMaxCharts charts (the rest named on the page).
constexpr size_t kMaxColumns = 4096, kMaxPoints = 2000, kMaxCharts = 300;

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

// A log's columns, and what the page must say about how it was read.
struct Log {
  std::map<std::string, Series> series;
  std::vector<double> restarts;  // steps where the log starts again (a resumed run)
};

// Columns of a log: name -> series. CSV has a header line; JSON lines are
// objects. Where steps go back (a run resumed from an earlier checkpoint
// appended to its log), the later rows replace the earlier ones from that
// step on, and the page says so.
Log parse_log(const std::string& path, const std::string& text) {
  Log log;
  auto& series = log.series;
  std::istringstream lines(text);
  std::string line, shown = printable(path);
  std::vector<std::string> header;
  bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  int64_t number = 0;
  double last_step = -INFINITY;
  auto add = [&](const std::string& name, double step, const std::string& value) {
    if (name == "step" || value.empty() || value == "null") return;
    auto it = series.find(name);
    if (it == series.end()) {
      QKV_CHECK(series.size() < kMaxColumns, shown, " line ", number, ": more than ", kMaxColumns,
                " columns; qkv writes a few per layer: not a qkv log");
      it = series.emplace(name, Series{}).first;
    }
    Series& s = it->second;
    while (!s.steps.empty() && s.steps.back() >= step) s.steps.pop_back(), s.values.pop_back(), s.text.pop_back();
    s.steps.push_back(step);
    s.values.push_back(io::parse_number(value, cat(shown, " line ", number, ": ", printable(name))));
    s.text.push_back(value);
  };
  // A row whose step is not past the last one starts the log again: every
  // column forgets its points from that step on (sparse ones too, like evaluations).
  auto row_step = [&](double step) {
    if (step <= last_step) {
      log.restarts.push_back(step);
      for (auto& [name, sr] : series)
        while (!sr.steps.empty() && sr.steps.back() >= step)
          sr.steps.pop_back(), sr.values.pop_back(), sr.text.pop_back();
    }
    last_step = step;
  };
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    if (csv) {
      std::vector<std::string> fields = split(line, ',');
      if (header.empty()) {
        header = fields;
        QKV_CHECK(!header.empty() && header[0] == "step", shown, ": not a qkv CSV log (no step column first)");
        QKV_CHECK(header.size() <= kMaxColumns + 1, shown, ": ", header.size(),
                  " columns; qkv writes a few per layer "
                  "(at most ",
                  kMaxColumns, "): not a qkv log");
        continue;
      }
      QKV_CHECK(fields.size() == header.size(), shown, " line ", number, ": ", fields.size(),
                " fields, the header has ", header.size());
      double step = io::parse_number(fields[0], cat(shown, " line ", number, ": step"));
      row_step(step);
      for (size_t i = 1; i < fields.size(); ++i) add(header[i], step, fields[i]);
    } else {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw Error(
            cat(shown, " line ", number, ": not JSON (a log is CSV if its name ends in .csv, else JSON lines)"));
      }
      QKV_CHECK(j.is_object() && j.contains("step") && j["step"].is_number(), shown, " line ", number, ": no step");
      double step = j["step"].get<double>();
      row_step(step);
      for (const auto& [name, v] : j.items())
        if (v.is_number()) add(name, step, io::exact_number(v.get<double>()));
    }
  }
  for (auto it = series.begin(); it != series.end();)  // a column whose every point a restart took back
    it = it->second.steps.empty() ? series.erase(it) : std::next(it);
  QKV_CHECK(!series.empty(), shown, ": no logged values");
  return log;
}

// 2nd, 3rd, 11th, 21st, 30th.
std::string ordinal(size_t k) {
  const char* suffix = k % 100 >= 11 && k % 100 <= 13 ? "th"
                       : k % 10 == 1                  ? "st"
                       : k % 10 == 2                  ? "nd"
                       : k % 10 == 3                  ? "rd"
                                                      : "th";
  return cat(k, suffix);
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// One line chart; a log scale where the values span more than 100x and are
// positive. Past kMaxPoints points, every k-th point (and the last) is drawn
// and held in the data attributes, and the chart says so.
std::string chart(const std::string& name, const std::string& title, const Series& all) {
  const int width = 640, height = 220, left = 64, right = 16, top = 28, bottom = 32;
  const size_t n = all.steps.size(), every = (n + kMaxPoints - 1) / kMaxPoints;
  Series s;
  for (size_t i = 0; i < n; ++i)
    if (i % every == 0 || i + 1 == n)
      s.steps.push_back(all.steps[i]), s.values.push_back(all.values[i]), s.text.push_back(all.text[i]);
  double x0 = *std::min_element(s.steps.begin(), s.steps.end()), x1 = *std::max_element(s.steps.begin(), s.steps.end());
  double y0 = *std::min_element(s.values.begin(), s.values.end()),
         y1 = *std::max_element(s.values.begin(), s.values.end());
  bool log_scale = y0 > 0 && y1 / y0 > 100;
  // Scaled by the largest magnitude, so that ±1e308 spans 2, not infinity.
  double scale = log_scale ? 1.0 : std::max({std::fabs(y0), std::fabs(y1), 1e-300});
  auto fy = [&](double v) { return log_scale ? std::log10(v) : v / scale; };
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
    steps += (i ? " " : "") + io::exact_number(s.steps[i]);
    values += (i ? " " : "") + s.text[i];
  }
  std::string svg =
      cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", height,
          "\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"", left, "\" y=\"16\" font-weight=\"bold\">",
          xml_text(title), log_scale ? " (log scale)" : "",
          every > 1 ? cat(" (every ", ordinal(every), " of ", n, " points drawn)") : std::string(), "</text>\n");
  svg += cat("<line x1=\"", left, "\" y1=\"", height - bottom, "\" x2=\"", width - right, "\" y2=\"", height - bottom,
             "\" stroke=\"#999\"/><line x1=\"", left, "\" y1=\"", top, "\" x2=\"", left, "\" y2=\"", height - bottom,
             "\" stroke=\"#999\"/>\n");
  svg +=
      cat("<text x=\"", left - 4, "\" y=\"", top + 4, "\" text-anchor=\"end\">", number_text(y1), "</text><text x=\"",
          left - 4, "\" y=\"", height - bottom, "\" text-anchor=\"end\">", number_text(y0), "</text>\n");
  svg += cat("<text x=\"", left, "\" y=\"", height - 12, "\">step ", number_text(x0), "</text><text x=\"",
             width - right, "\" y=\"", height - 12, "\" text-anchor=\"end\">", number_text(x1), "</text>\n");
  // Every drawn point's text, never cut: numbers, validated when read.
  svg += cat("<polyline class=\"series\" data-name=\"", xml_text(name), "\" data-points=\"", n, "\" data-every=\"",
             every, "\" data-steps=\"", steps, "\" data-values=\"", xml_text(values, values.size()), "\" points=\"",
             points, "\" fill=\"none\" stroke=\"#2a5db0\" stroke-width=\"1.5\"/>\n");
  if (s.steps.size() <= 200)  // evaluations and short runs: a dot per point, hover for its value
    for (size_t i = 0; i < s.steps.size(); ++i)
      svg += cat("<circle cx=\"", px(s.steps[i]), "\" cy=\"", py(s.values[i]),
                 "\" r=\"2.5\" fill=\"#2a5db0\"><title>step ", io::exact_number(s.steps[i]), ": ", xml_text(s.text[i]),
                 "</title></circle>");
  return svg + "\n</svg>\n";
}

}  // namespace

int plot(int argc, char** argv) {
  cxxopts::Options options("qkv plot", "A --log file (CSV or JSON lines) as an HTML page of charts against the step.");
  options.add_options()("log", "the log file qkv train --log wrote", cxxopts::value<std::string>(), "FILE")(
      "out", "the HTML file (default: the log's name with .html)", cxxopts::value<std::string>(), "FILE")(
      "force", "replace an existing --out")("h,help", "show this help");
  options.parse_positional({"log"});
  options.positional_help("LOG");
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
  Log log = parse_log(path, io::read_regular_file(path, kMaxLogBytes, "log file"));
  const auto& series = log.series;
  // The charts in the order a reader asks: is it learning, is it generalising, is it healthy, is it fast.
  const std::vector<std::pair<std::string, std::string>> order{{"loss", "training loss (each step)"},
                                                               {"eval_loss", "held-out loss (nats/byte)"},
                                                               {"eval_accuracy", "held-out exact match"},
                                                               {"lr", "learning rate"},
                                                               {"grad_norm", "gradient norm (before clipping)"},
                                                               {"attn_entropy", "mean attention entropy"},
                                                               {"tokens_per_s", "tokens per second"}};
  std::string html =
      cat("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\"><head><meta charset=\"utf-8\"/>"
          "<title>qkv training report</title><style>body{font-family:sans-serif}</style></head><body>\n"
          "<h1>",
          xml_text(path), "</h1>\n");
  if (!log.restarts.empty())
    html += cat("<p class=\"note\" data-restarts=\"", log.restarts.size(), "\">The log starts again ",
                log.restarts.size() == 1 ? std::string("once") : cat(log.restarts.size(), " times"), " (first at step ",
                io::exact_number(log.restarts.front()),
                "): a run resumed from an earlier checkpoint. Where steps repeat, the later rows are drawn.</p>\n");
  size_t charts = 0;
  std::vector<std::string> drawn, left_out;
  auto draw = [&](const std::string& name, const std::string& title, const Series& s) {
    if (charts >= kMaxCharts) return left_out.push_back(name);
    html += chart(name, title, s), ++charts, drawn.push_back(name);
  };
  for (const auto& [name, title] : order)
    if (series.count(name)) draw(name, title, series.at(name));
  for (const auto& [name, s] : series)  // anything else the log holds (per-layer norms, ...)
    if (std::find(drawn.begin(), drawn.end(), name) == drawn.end()) draw(name, name, s);
  if (!left_out.empty())
    html += cat("<p class=\"note\" data-left-out=\"", left_out.size(), "\">", left_out.size(),
                " more columns are not drawn "
                "(at most ",
                kMaxCharts, " charts): ", xml_text(left_out.front()), " to ", xml_text(left_out.back()), ".</p>\n");
  html += "</body></html>\n";
  io::write_file(out, html);
  std::printf("wrote %zu charts (%zu steps) to %s\n", charts,
              series.count("loss") ? series.at("loss").steps.size() : size_t{0}, printable(out).c_str());
  return 0;
}

}  // namespace qkv::cli
