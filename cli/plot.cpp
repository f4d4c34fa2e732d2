// qkv plot: --log files (CSV or JSON lines) drawn as the study page's
// curves alone (study/curves.cpp reads them): each logged quantity against
// the step, the runs overlaid. The page holds the logged numbers
// themselves, so tests (and users) can read them back from its JSON.
#include <algorithm>
#include <cstdio>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "study/page_data.h"

namespace qkv::cli {

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
  nlohmann::json curves = study::curves_json(paths);
  std::string title = paths.size() == 1 ? printable(paths.front()) : cat(paths.size(), " runs");
  io::write_file(
      out, study::page_html({{"title", cat("qkv plot: ", title)}, {"subtitle", "training curves"}, {"curves", curves}}),
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
