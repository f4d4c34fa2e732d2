// A Study laid out as the page (study/page.h): one backward through the
// traced graph, then each view's data (page_data.h) and the HTML around it.
#include "study/page.h"

#include "io/output.h"
#include "study/neurons.h"
#include "study/page_data.h"

namespace qkv::study {

namespace {

// The attention views: maps with dL/dP and head importances, the loss, each head's projection gradients,
// a classifier's [CLS] rows, and the neuron view.
nlohmann::json attention_views(const Study& s, const std::vector<std::pair<std::string, Tensor>>& params,
                               const PageOptions& options) {
  const int64_t heads = s.maps.front().weights.size(-3);
  nlohmann::json attention = attention_json(s.maps, options.window, true);
  attention["loss"] = {{"value", page_number(s.loss.item())}, {"what", s.what}};
  attention["projections"] = projections_json(params, heads);
  if (!options.note.empty()) attention["note"] = options.note;
  nlohmann::json figures = nlohmann::json::array();
  for (const AttentionMap& m : s.maps)
    if (m.cls_first) figures.push_back({{"title", m.name}, {"svg", cls_views(m, heads, [](auto&, auto&) {})}});
  attention["figures"] = figures;
  attention["neurons"] = neuron_json(s);
  return attention;
}

// The curves of options.logs into data["curves"], or why there are none into data["curves_note"].
void add_curves(nlohmann::json& data, const PageOptions& options, PageSummary& summary) {
  summary.curves_note = options.curves_note;
  if (!options.logs.empty()) {
    try {
      data["curves"] = curves_json(options.logs);
      summary.logs = options.logs.size();
    } catch (const Error& e) {
      if (!options.skip_unreadable_logs) throw;  // a log the user named must be drawn
      summary.curves_note = cat("the run's log could not be drawn: ", e.what());
    }
  }
  if (!summary.curves_note.empty()) data["curves_note"] = summary.curves_note;
}

}  // namespace

std::string page_html(Study& s, const nn::Module& model, const PageOptions& options, PageSummary* summary) {
  QKV_CHECK(s.loss.defined() && s.loss.numel() == 1, "page: the study has no scalar loss");
  QKV_CHECK(s.inputs.size() == s.maps.size(), "page: ", s.maps.size(), " maps but ", s.inputs.size(),
            " attention inputs (one per map, undefined where a call is not a scaled dot product)");
  check_page_size(s.maps);  // before the backward pass
  const auto params = model.named_parameters();
  Graph graph = trace_graph(s.loss, params);
  graph.retain_grads();
  s.loss.backward();

  const double loss = s.loss.item();
  nlohmann::json data = {{"title", options.title},
                         {"subtitle", options.subtitle.empty() ? cat(s.what, " = ", loss) : options.subtitle},
                         {"graph", graph_json(graph, params, options.causal_model)}};
  if (!s.maps.empty()) data["attention"] = attention_views(s, params, options);
  if (!options.model.kind.empty())
    data["model"] = {{"kind", options.model.kind},
                     {"title", options.model.title},
                     {"layers", options.model.layers},
                     {"heads", options.model.heads},
                     {"width", options.model.width},
                     {"task", options.model.task},
                     {"checkpoint", options.model.checkpoint}};
  if (s.embedding.defined() && s.embedding.grad().defined()) {
    nlohmann::json tokens = nlohmann::json::array(), values = nlohmann::json::array();
    for (const std::string& t : s.embedded) tokens.push_back(page_token(t));
    for (double v : token_attribution(s)) values.push_back(page_number(v));
    data["attribution"] = {{"tokens", tokens}, {"values", values}, {"loss", s.what}};
  }
  PageSummary drawn;
  add_curves(data, options, drawn);
  std::string html = page_html(data);
  drawn.bytes = html.size(), drawn.graph_nodes = graph.nodes.size();
  if (summary) *summary = drawn;
  return html;
}

PageSummary write_page(const std::string& path, Study& s, const nn::Module& model, const PageOptions& options) {
  PageSummary summary;
  io::write_file(path, page_html(s, model, options, &summary));
  return summary;
}

}  // namespace qkv::study
