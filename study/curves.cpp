// The study page's curves: --log files (CSV or JSON lines, as qkv train and
// train::Trainer write them) read, in bounded memory, into each logged
// quantity against the step, the runs overlaid (page_data.h: curves_json).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "io/memory.h"
#include "io/metadata.h"
#include "study/log_lines.h"
#include "study/page_data.h"
#include "train/trainer.h"

namespace qkv::study {

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

// One logged quantity, as the page draws it: every `every`-th of its `points` points (and the last).
struct Series {
  std::vector<double> steps, values;
  size_t points = 0, every = 1;
};

// A log as read: its columns' names in order, each with the rows that have a value of it, and the rows a
// restart did not take back. Rows are kept by their step and line number (and which columns they fill, a
// bit each); values are parsed to check them, then read again only for the points the page draws: a
// 128 MiB log costs a few MB, not ten times its size.
struct Rows {
  std::vector<std::string> names;             // column i's name (CSV: the header's; JSON: in order of first use)
  std::map<std::string, size_t> index;        // name -> column
  std::vector<double> steps;                  // each kept row's step
  std::vector<int64_t> lines;                 // and its line number
  std::vector<std::vector<uint64_t>> filled;  // and the columns it fills, a bit each
  std::vector<double> restarts;               // steps where the log starts again (a resumed run)
};

// A row's fields, name and value (views into the line, or into storage kept until the next row): a CSV
// row's by the header, a JSON row's as parsed. Errors name the file and the line.
std::vector<std::pair<std::string_view, std::string_view>> row_fields(std::string_view line, bool csv,
                                                                      const std::vector<std::string>& header,
                                                                      const std::string& shown, int64_t number) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  if (csv) {
    const size_t fields = static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1;
    QKV_CHECK(fields == header.size(), shown, " line ", number, ": ", fields, " fields, the header has ",
              header.size());
    size_t at = 0;
    for (size_t i = 0; i < fields; ++i) {
      const size_t comma = line.find(',', at);
      out.emplace_back(header[i], line.substr(at, comma == std::string_view::npos ? comma : comma - at));
      at = comma + 1;
    }
    return out;
  }
  std::map<std::string, double> row;
  try {
    row = io::parse_json_numbers(line);
  } catch (const Error& e) {
    throw Error(cat(shown, " line ", number, ": ", e.what(),
                    " (a log is CSV if its name ends in .csv or .CSV, else JSON lines)"));
  }
  QKV_CHECK(row.count("step"), shown, " line ", number, ": no step");
  static thread_local std::vector<std::string> keys, values;
  keys.clear(), values.clear();
  for (const auto& [name, v] : row) keys.push_back(name), values.push_back(io::exact_number(v));
  for (size_t i = 0; i < keys.size(); ++i) out.emplace_back(keys[i], values[i]);
  return out;
}

// A value, as io::parse_number reads it; the error's words are built only for a bad one.
double value_of(std::string_view text, const std::string& shown, int64_t number, std::string_view name) {
  double v = 0;
  if (io::parse_finite(text, v)) return v;
  return io::parse_number(text, cat(shown, " line ", number, ": ", printable(std::string(name))));
}

// The CSV header: a step column first, names unique, at most kMaxColumns more.
std::vector<std::string> read_header(std::string_view line, const std::string& shown) {
  const size_t columns = static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1;
  QKV_CHECK(columns <= kMaxColumns + 1, shown, ": ", columns, " columns; qkv writes a few per layer (at most ",
            kMaxColumns, "): not a qkv log");
  std::vector<std::string> header;
  size_t at = 0;
  for (size_t i = 0; i < columns; ++i) {
    const size_t comma = line.find(',', at);
    header.emplace_back(line.substr(at, comma == std::string_view::npos ? comma : comma - at));
    at = comma + 1;
  }
  QKV_CHECK(!header.empty() && header[0] == "step", shown, ": not a qkv CSV log (no step column first)");
  std::set<std::string> names(header.begin(), header.end());
  QKV_CHECK(names.size() == header.size(), shown, ": a column name is repeated in the header: not a qkv log");
  return header;
}

// A row whose step is not past the last one starts the log again: the rows from that step on go.
void start_again_if_back(Rows& rows, double step, const std::string& shown, int64_t number) {
  if (rows.steps.empty() || step > rows.steps.back()) return;
  QKV_CHECK(rows.restarts.size() < kMaxRestarts, shown, " line ", number, ": the steps go back more than ",
            kMaxRestarts, " times (a log starts again once per resumed run): not a qkv log");
  rows.restarts.push_back(step);
  while (!rows.steps.empty() && rows.steps.back() >= step)
    rows.steps.pop_back(), rows.lines.pop_back(), rows.filled.pop_back();
}

// The column of `name`, made at its first value.
int64_t column_id(Rows& rows, std::string_view name, const std::string& shown, int64_t number) {
  auto it = rows.index.find(std::string(name));
  if (it != rows.index.end()) return static_cast<int64_t>(it->second);
  QKV_CHECK(rows.names.size() < kMaxColumns, shown, " line ", number, ": more than ", kMaxColumns,
            " columns; qkv writes a few per layer: not a qkv log");
  rows.index.emplace(std::string(name), rows.names.size());
  rows.names.emplace_back(name);
  return static_cast<int64_t>(rows.names.size()) - 1;
}

// The first pass: every row read and every value checked; what the rows hold, and which survive restarts.
Rows read_rows(LogLines& lines, const std::string& shown, bool csv) {
  Rows rows;
  std::vector<std::string> header;
  std::vector<int64_t> column_at;  // a CSV position's column, -1 until its first value
  std::string_view line;
  int64_t number = 0;
  while (lines.next(line, number)) {
    if (line.empty()) continue;
    if (csv && header.empty()) {
      header = read_header(line, shown);
      continue;
    }
    const auto fields = row_fields(line, csv, header, shown, number);
    if (column_at.size() < header.size()) column_at.assign(header.size(), -1);
    double step = 0;
    std::vector<uint64_t> filled;
    for (size_t position = 0; position < fields.size(); ++position) {
      const auto& [name, value] = fields[position];
      if (name == "step") step = value_of(value, shown, number, "step");
      if (name == "step" || value.empty() || value == "null") continue;
      value_of(value, shown, number, name);
      int64_t c = csv ? column_at[position] : -1;  // a CSV field's column is its position's, looked up once
      if (c < 0) c = column_id(rows, name, shown, number);
      if (csv) column_at[position] = c;
      const size_t word = static_cast<size_t>(c) / 64;
      if (filled.size() <= word) filled.resize(word + 1, 0);
      filled[word] |= uint64_t{1} << (c % 64);
    }
    start_again_if_back(rows, step, shown, number);
    rows.steps.push_back(step), rows.lines.push_back(number), rows.filled.push_back(std::move(filled));
  }
  return rows;
}

bool fills(const std::vector<uint64_t>& filled, size_t column) {
  return column / 64 < filled.size() && (filled[column / 64] >> (column % 64) & 1);
}

// The second pass: the kept rows read again, and the points the page draws of the first kMaxCharts columns
// (in name order) taken: past kMaxPoints points, every k-th point and the last. Values keep their precision.
std::map<std::string, Series> draw_points(LogLines& lines, const Rows& rows, bool csv, const std::string& shown,
                                          std::vector<std::string>& left_out) {
  std::map<std::string, Series> drawn;
  std::vector<size_t> counts(rows.names.size(), 0), seen(rows.names.size(), 0);
  for (const auto& filled : rows.filled)
    for (size_t c = 0; c < counts.size(); ++c) counts[c] += fills(filled, c);
  for (const auto& [name, c] : rows.index) {  // in name order, as the page lists them
    if (counts[c] == 0) continue;             // a column whose every point a restart took back
    if (drawn.size() >= kMaxCharts) {
      left_out.push_back(name);
      continue;
    }
    Series& s = drawn[name];
    s.points = counts[c], s.every = (counts[c] + kMaxPoints - 1) / kMaxPoints;
  }
  std::vector<Series*> series_of(rows.names.size(), nullptr);
  for (auto& [name, s] : drawn) series_of[rows.index.at(name)] = &s;
  lines.rewind();
  std::vector<std::string> header;
  std::vector<int64_t> column_at;  // a CSV position's column: -2 until looked up, -1 for none
  std::string_view line;
  int64_t number = 0;
  for (size_t r = 0; r < rows.lines.size() && lines.next(line, number);) {
    if (csv && header.empty() && !line.empty()) header = read_header(line, shown), column_at.assign(header.size(), -2);
    if (number != rows.lines[r]) continue;
    const auto fields = row_fields(line, csv, header, shown, number);
    for (size_t position = 0; position < fields.size(); ++position) {
      const auto& [name, value] = fields[position];
      int64_t c = csv ? column_at[position] : -2;
      if (c == -2) {
        auto it = rows.index.find(std::string(name));
        c = it == rows.index.end() ? -1 : static_cast<int64_t>(it->second);
        if (csv) column_at[position] = c;
      }
      if (c < 0 || !fills(rows.filled[r], static_cast<size_t>(c))) continue;
      Series* series = series_of[c];
      const size_t i = seen[c]++;
      if (!series || (i % series->every != 0 && i + 1 != series->points)) continue;
      series->steps.push_back(rows.steps[r]);
      series->values.push_back(value_of(value, shown, number, name));
    }
    ++r;
  }
  return drawn;
}

// Columns of a log: name -> series. CSV has a header line; JSON lines are
// objects. Where steps go back (a run resumed from an earlier checkpoint
// appended to its log), the later rows replace the earlier ones from that
// step on, and the page says so.
struct Log {
  std::map<std::string, Series> series;
  std::vector<std::string> left_out;  // columns past kMaxCharts, named on the page
  std::vector<double> restarts;
};

Log parse_log(const std::string& path) {
  const std::string shown = printable(path);
  const bool csv = train::is_csv_log(path);
  LogLines lines(path, kMaxLogBytes, kMaxLineBytes, "log file");
  // What reading it costs, before a line is parsed: a bit per row and column, the points drawn, a line.
  io::check_fits_in_memory(static_cast<double>(lines.size()) / 8 + kMaxCharts * (kMaxPoints + 1) * 16.0 + (4 << 20),
                           cat(shown, ": reading the log"), "plot a smaller log");
  const Rows rows = read_rows(lines, shown, csv);
  Log log;
  log.series = draw_points(lines, rows, csv, shown, log.left_out);
  log.restarts = rows.restarts;
  QKV_CHECK(!log.series.empty(), shown, ": no logged values");
  return log;
}

nlohmann::json series_json(const Series& s) {
  nlohmann::json steps = nlohmann::json::array(), values = nlohmann::json::array();
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const double step = s.steps[i];  // whole steps as integers: what the log wrote
    steps.push_back(step == std::floor(step) && std::fabs(step) < 1e15 ? nlohmann::json(static_cast<int64_t>(step))
                                                                       : nlohmann::json(step));
    values.push_back(s.values[i]);
  }
  return {{"steps", steps}, {"values", values}, {"points", s.points}, {"every", s.every}};
}

}  // namespace

nlohmann::json curves_json(const std::vector<std::string>& log_paths) {
  QKV_CHECK(log_paths.size() <= kMaxLogs, log_paths.size(), " logs: a page compares at most ", kMaxLogs);
  nlohmann::json runs = nlohmann::json::array();
  for (const std::string& path : log_paths) {
    Log log = parse_log(path);
    nlohmann::json columns = nlohmann::json::object(), restarts = nlohmann::json::array();
    for (const auto& [name, s] : log.series) {
      std::string key = page_token(name);  // two long names may print alike: the later one is numbered
      for (int k = 2; columns.contains(key); ++k) key = cat(page_token(name), " #", k);
      columns[key] = series_json(s);
    }
    for (double step : log.restarts) restarts.push_back(step);
    nlohmann::json run{{"name", page_token(path)}, {"columns", columns}, {"restarts", restarts}};
    if (!log.left_out.empty())
      run["left_out"] = {{"count", log.left_out.size()},
                         {"first", page_token(log.left_out.front())},
                         {"last", page_token(log.left_out.back())},
                         {"limit", kMaxCharts}};
    runs.push_back(std::move(run));
  }
  return {{"runs", runs}};
}

}  // namespace qkv::study
