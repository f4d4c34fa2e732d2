// qkv plot: --log files (CSV or JSON lines) read into the curves the page
// draws (page.h): each logged quantity against the step, the runs overlaid.
// The page holds the logged numbers themselves, so tests (and users) can
// read them back from its JSON.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "heatmaps.h"
#include "io/metadata.h"
#include "io/output.h"
#include "nn/checkpoint.h"
#include "page.h"
#include "train/trainer.h"

namespace qkv::cli {

namespace {

constexpr int64_t kMaxLogBytes = int64_t{256} << 20;
// The page stays bounded whatever the log: a qkv log has about 2 columns per
// layer (at most ~520), so more is not one; each chart draws at most
// kMaxPoints points (every k-th, stated on the chart), and at most
// kMaxCharts charts (the rest named on the page).
constexpr size_t kMaxColumns = 4096, kMaxPoints = 2000, kMaxCharts = 300, kMaxLogs = 8;
// Each restart (steps going back) walks every column, and the page lists
// them: 10 MB of steps 1, 0, 1, 0, ... under 4096 columns took 11 s, so the
// 256 MB a log may hold about 5 minutes. qkv's own logs have none (--resume
// trims the log to its checkpoint); an older log gained one per resumed run.
constexpr size_t kMaxRestarts = 1000;
// A row: at most kMaxColumns columns of a number (~25 bytes) and a name (~40 for
// "grad_norm.blocks.11.attn"), so 1 MiB is several times what qkv writes, and a
// JSON row's parse tree stays in tens of MB.
constexpr size_t kMaxLineBytes = 1 << 20;

// One logged quantity: its points in step order.
struct Series {
  std::vector<double> steps, values;
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
  // A spreadsheet's export: a UTF-8 byte-order mark first, or lines ended by CR alone (classic Mac).
  std::string body = text.substr(text.rfind("\xef\xbb\xbf", 0) == 0 ? 3 : 0);
  if (body.find('\n') == std::string::npos) std::replace(body.begin(), body.end(), '\r', '\n');
  std::istringstream lines(std::move(body));
  std::string line, shown = printable(path);
  std::vector<std::string> header;
  bool csv = train::is_csv_log(path);
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
    while (!s.steps.empty() && s.steps.back() >= step) s.steps.pop_back(), s.values.pop_back();
    s.steps.push_back(step);
    s.values.push_back(io::parse_number(value, cat(shown, " line ", number, ": ", printable(name))));
  };
  // A row whose step is not past the last one starts the log again: every
  // column forgets its points from that step on (sparse ones too, like evaluations).
  auto row_step = [&](double step) {
    if (step <= last_step) {
      QKV_CHECK(log.restarts.size() < kMaxRestarts, shown, " line ", number, ": the steps go back more than ",
                kMaxRestarts, " times (a log starts again once per resumed run): not a qkv log");
      log.restarts.push_back(step);
      for (auto& [name, sr] : series)
        while (!sr.steps.empty() && sr.steps.back() >= step) sr.steps.pop_back(), sr.values.pop_back();
    }
    last_step = step;
  };
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a log that passed through Windows
    if (line.empty()) continue;
    QKV_CHECK(line.size() <= kMaxLineBytes, shown, " line ", number, ": ", line.size(),
              " bytes; a qkv log row holds at most ", kMaxLineBytes, ": not a qkv log");
    if (csv) {
      std::vector<std::string> fields = split(line, ',');
      if (header.empty()) {
        header = fields;
        QKV_CHECK(!header.empty() && header[0] == "step", shown, ": not a qkv CSV log (no step column first)");
        QKV_CHECK(header.size() <= kMaxColumns + 1, shown, ": ", header.size(),
                  " columns; qkv writes a few per layer "
                  "(at most ",
                  kMaxColumns, "): not a qkv log");
        std::set<std::string> names(header.begin(), header.end());
        QKV_CHECK(names.size() == header.size(), shown, ": a column name is repeated in the header: not a qkv log");
        continue;
      }
      QKV_CHECK(fields.size() == header.size(), shown, " line ", number, ": ", fields.size(),
                " fields, the header has ", header.size());
      double step = io::parse_number(fields[0], cat(shown, " line ", number, ": step"));
      row_step(step);
      for (size_t i = 1; i < fields.size(); ++i) add(header[i], step, fields[i]);
    } else {
      std::map<std::string, double> row;
      try {
        row = io::parse_json_numbers(line);
      } catch (const Error& e) {
        throw Error(cat(shown, " line ", number, ": ", e.what(),
                        " (a log is CSV if its name ends in .csv or .CSV, else JSON lines)"));
      }
      QKV_CHECK(row.count("step"), shown, " line ", number, ": no step");
      double step = row.at("step");
      row_step(step);
      for (const auto& [name, v] : row) add(name, step, io::exact_number(v));
    }
  }
  for (auto it = series.begin(); it != series.end();)  // a column whose every point a restart took back
    it = it->second.steps.empty() ? series.erase(it) : std::next(it);
  QKV_CHECK(!series.empty(), shown, ": no logged values");
  return log;
}

// Past kMaxPoints points, every k-th point (and the last) is kept, and the
// page says so; values keep their full precision (hover shows 4 digits).
nlohmann::json series_json(const Series& all) {
  const size_t n = all.steps.size(), every = (n + kMaxPoints - 1) / kMaxPoints;
  nlohmann::json steps = nlohmann::json::array(), values = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i)
    if (i % every == 0 || i + 1 == n) {
      double step = all.steps[i];  // whole steps as integers: what the log wrote
      steps.push_back(step == std::floor(step) && std::fabs(step) < 1e15 ? nlohmann::json(static_cast<int64_t>(step))
                                                                         : nlohmann::json(step));
      values.push_back(all.values[i]);
    }
  return {{"steps", steps}, {"values", values}, {"points", n}, {"every", every}};
}

}  // namespace

nlohmann::json curves_json(const std::vector<std::string>& log_paths) {
  QKV_CHECK(log_paths.size() <= kMaxLogs, log_paths.size(), " logs: a page compares at most ", kMaxLogs);
  nlohmann::json runs = nlohmann::json::array();
  for (const std::string& path : log_paths) {
    Log log = parse_log(path, io::read_regular_file(path, kMaxLogBytes, "log file"));
    nlohmann::json columns = nlohmann::json::object(), restarts = nlohmann::json::array();
    std::vector<std::string> left_out;
    for (const auto& [name, s] : log.series) {
      if (columns.size() >= kMaxCharts) {
        left_out.push_back(name);
        continue;
      }
      std::string key = page_token(name);  // two long names may print alike: the later one is numbered
      for (int k = 2; columns.contains(key); ++k) key = cat(page_token(name), " #", k);
      columns[key] = series_json(s);
    }
    for (double step : log.restarts) restarts.push_back(step);
    nlohmann::json run{{"name", page_token(path)}, {"columns", columns}, {"restarts", restarts}};
    if (!left_out.empty())
      run["left_out"] = {{"count", left_out.size()},
                         {"first", page_token(left_out.front())},
                         {"last", page_token(left_out.back())},
                         {"limit", kMaxCharts}};
    runs.push_back(std::move(run));
  }
  return {{"runs", runs}};
}

int plot(int argc, char** argv) {
  cxxopts::Options options("qkv plot",
                           "One or more --log files (CSV or JSON lines) as an HTML page of interactive charts against "
                           "the step (several logs are overlaid): the curves view of qkv explore, alone.");
  options.add_options()("log", "a log file qkv train --log wrote (repeat, or list several, to compare runs)",
                        cxxopts::value<std::vector<std::string>>(), "FILE")(
      "out", "the HTML file (default: the first log's name with .html)", cxxopts::value<std::string>(), "FILE")(
      "force", "replace an existing --out")("h,help", "show this help");
  options.parse_positional({"log"});
  options.positional_help("LOG [LOG...]");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::puts(options.help().c_str());
    return 0;
  }
  QKV_CHECK(args.unmatched().empty(), "unexpected argument '", printable(args.unmatched()[0]), "'");
  stop_if_parse_only();
  QKV_CHECK(args.count("log"), "give the log file: qkv plot FILE");
  std::vector<std::string> paths = args["log"].as<std::vector<std::string>>();
  std::string out = args.count("out") ? args["out"].as<std::string>() : paths.front() + ".html";
  io::check_output_file(out, "--out", args.count("force") > 0, paths, "--force");  // before reading: nothing is lost
  nlohmann::json curves = curves_json(paths);
  std::string title = paths.size() == 1 ? printable(paths.front()) : cat(paths.size(), " runs");
  io::write_file(out,
                 page_html({{"title", cat("qkv plot: ", title)}, {"subtitle", "training curves"}, {"curves", curves}}),
                 existing_for(args));
  // Each log's steps and curves (the first log's alone once stood for all of them).
  std::string steps, columns;
  for (size_t i = 0; i < curves["runs"].size(); ++i) {
    const nlohmann::json& run = curves["runs"][i]["columns"];
    const char* sep = i == 0 ? "" : i + 1 == curves["runs"].size() ? " and " : ", ";
    size_t most = 0;  // the steps of its longest curve (a log without a loss column is still its steps)
    for (const auto& [name, series] : run.items()) most = std::max(most, series["points"].get<size_t>());
    steps += cat(sep, most);
    columns += cat(sep, run.size());
  }
  if (paths.size() == 1)
    std::printf("wrote %s curve%s of 1 log (%s step%s) to %s\n", columns.c_str(), columns == "1" ? "" : "s",
                steps.c_str(), steps == "1" ? "" : "s", printable(out).c_str());
  else
    std::printf("wrote the curves of %zu logs (%s steps; %s curves) to %s\n", paths.size(), steps.c_str(),
                columns.c_str(), printable(out).c_str());
  return 0;
}

}  // namespace qkv::cli
