// The study page for any model: one self-contained HTML file (its data as
// JSON, its script and Debian's dygraphs and dagre inlined) that works
// offline. It shows a Study's attention (head, model and matrix views) with
// dL/dP and each head's importance, how each score is made from q and k (the
// neuron view), token attribution, the autograd graph of the study's forward
// and backward, and the curves of training logs. qkv explore writes it for a
// checkpoint; a program with its own model writes it with write_page():
//
//   model.eval();
//   qkv::study::Study s = qkv::study::record([&] { return model.loss(ids, targets); }, tokens);
//   qkv::study::write_page("my_model.html", s, model, {.title = "my model", .logs = {"run.csv"}});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/module.h"
#include "study/study.h"

namespace qkv::study {

/// What a page says besides its study.
struct PageOptions {
  std::string title = "qkv study";
  std::string subtitle;           // default: "<what> = <loss>"
  std::vector<std::string> logs;  // training logs to draw (CSV or JSON lines, as qkv train --log and Trainer write)
  /// A log that cannot be read: false throws (a log the user named must be
  /// drawn), true draws none and says why on the page.
  bool skip_unreadable_logs = false;
  std::string curves_note;  // said where the curves would be (why there are none)
  int64_t window = 0;       // > 0: self-attention sees only a band of that many keys (windowed attention)
  std::string note;         // said above the maps: what the model is and how it reads its input
  /// What the model is, as the page's data records it (none where kind is empty).
  struct Model {
    std::string kind, title, task, checkpoint;
    int64_t layers = 0, heads = 0, width = 0;
  } model;
  bool causal_model = false;  // its self-attention is causal (tells the graph a causal mask from a padding mask)
};

/// What write_page() drew.
struct PageSummary {
  size_t bytes = 0;         // the page's size
  size_t graph_nodes = 0;   // nodes of the autograd graph view
  size_t logs = 0;          // logs whose curves it holds
  std::string curves_note;  // why it holds none, where it holds none
};

/// The page of `s`: runs s.loss's backward (once, with the graph traced and
/// every node's gradient kept), then lays out every view. The model's
/// parameters name the graph's leaves and give each head's projection
/// gradients. Throws (before the backward) where the maps would make a page
/// of more than kPageCells weights, and where a log cannot be read.
std::string page_html(Study& s, const nn::Module& model, const PageOptions& options = {},
                      PageSummary* summary = nullptr);

/// page_html() written to `path` (whole or not at all: io::write_file).
PageSummary write_page(const std::string& path, Study& s, const nn::Module& model, const PageOptions& options = {});

}  // namespace qkv::study
