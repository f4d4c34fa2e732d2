// qkv attention: every layer's and head's attention for a prompt, as SVGs and a page.
#include <cstdio>

#include <cxxopts.hpp>

#include "bounds.h"
#include "commands.h"
#include "common.h"
#include "io/output.h"
#include "study.h"
#include "study/heatmaps.h"
#include "study/page_data.h"

namespace qkv::cli {

int attention(int argc, char** argv) {
  cxxopts::Options options("qkv attention",
                           "Draw every layer's and head's attention for a prompt: index.html (the attention views of "
                           "qkv explore, alone) and one SVG per map and head.");
  options.custom_help("CHECKPOINT --prompt TEXT --out FOLDER [OPTION...]");
  options.add_options()("checkpoint", "(required; or give it first) checkpoint file (any kind but linear attention)",
                        cxxopts::value<std::string>(),
                        "FILE")("prompt", "(required) the prompt (a task input is shown with the model's answer)",
                                cxxopts::value<std::string>(), "TEXT")(
      "out", "(required) output folder: index.html and one SVG per map and head (created; it holds this result alone)",
      cxxopts::value<std::string>(), "FOLDER")("force", "replace the earlier result in --out")(
      "data", kDigitsDataHelp, cxxopts::value<std::string>(), "FILE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  std::string path = required(args, "checkpoint"), prompt = required(args, "prompt"), out = required(args, "out");
  io::OutputFolder folder(out, "--out", args.count("force") > 0, {".svg", ".html"},
                          "--force");  // checked before any work
  auto runner = load_runner(path);
  use_digits_data(*runner, args, path);
  std::vector<AttentionMap> maps = attention_maps(*runner, prompt);
  check_page_size(maps);  // before a picture is drawn (a 3000-byte prompt drew 1.5 GB of them first)
  auto write = [&](const std::string& name, const std::string& text) { folder.write(name, text); };
  const int64_t heads = runner->spec().heads;
  // Each map and head as an SVG of its own (and each map's mean over its heads);
  // a classifier's [CLS] row also over the image or the tokens, shown on the page too.
  nlohmann::json figures = nlohmann::json::array();
  const int64_t window = attention_window(runner->spec());
  for (const AttentionMap& map : maps) {
    const int64_t rows = static_cast<int64_t>(map.rows.size()), cols = static_cast<int64_t>(map.cols.size());
    const std::vector<bool> masked = masked_cells(map, window);
    if (map.cls_first) figures.push_back({{"title", map.name}, {"svg", cls_views(map, heads, write)}});
    std::vector<double> all = map.weights.to_vector(), mean(rows * cols, 0.0);
    for (int64_t h = 0; h <= heads; ++h) {
      bool average = h == heads;
      std::vector<double> w =
          average ? mean : std::vector<double>(all.begin() + h * rows * cols, all.begin() + (h + 1) * rows * cols);
      if (!average)
        for (int64_t k = 0; k < rows * cols; ++k) mean[k] += w[k] / static_cast<double>(heads);
      write(average ? cat(map.file, "_mean.svg") : cat(map.file, "_head", h, ".svg"),
            study::heatmap_svg(w, rows, cols, map.rows, map.cols,
                               average ? cat(map.name, ", mean of ", heads, " heads") : cat(map.name, ", head ", h),
                               map.split, masked));
    }
  }
  nlohmann::json attention = attention_json(maps, window, false);
  attention["figures"] = figures;
  attention["note"] = cat(runner->kind().title, runner->kind().maps_note);
  write("index.html",
        study::page_html({{"title", cat("qkv attention: ", study::page_token(path))},
                          {"subtitle", cat(study::page_token(prompt), ": ", maps.size(), " maps x ", heads, " heads")},
                          {"attention", attention}}));
  folder.commit();
  std::printf("wrote %zu heatmaps (%zu maps x %lld heads, and each map's mean) and index.html to %s\n",
              maps.size() * static_cast<size_t>(heads + 1), maps.size(), static_cast<long long>(heads),
              printable(out).c_str());
  return 0;
}

}  // namespace qkv::cli
