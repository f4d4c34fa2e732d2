// What the label tasks share (LabelTask, label_tasks.h): sizing a classifier
// or recommender for the task, its held-out metrics, its prompts and answers.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "autograd/error.h"
#include "kinds.h"
#include "label_tasks.h"
#include "model_spec.h"
#include "runner.h"

namespace qkv::cli {

void LabelTask::resolve(ModelSpec& spec, const KindRow& kind, bool) {
  take_vocab(spec);
  if (kind.scores_classes && spec.classes == 0) spec.classes = labels();
  // A checkpoint's classes must be the task's: scores past them would index past the confusion matrix.
  QKV_CHECK(!kind.scores_classes || spec.classes == labels(), with_article(spec.model), " of ", spec.classes,
            " classes for the ", spec.task, " task, which has ", labels());
  kind.fill(spec, *this);
  kind.model().check(spec, cat("--model ", spec.model));
  int64_t need = kind.context_for(spec, *this);
  // A ViT reads its patches and [CLS] whatever a context says: another --context is refused rather than
  // recorded (info showed it, the memory estimate counted it); a file that recorded one reads what it reads.
  if (kind.fixed_context && spec.context > 0 && spec.context != need) {
    QKV_CHECK(!spec.source.empty(), "--context ", spec.context, ": a ", kind.title, " reads ", need, " tokens (",
              need - 1, " patches and [CLS]): leave --context out, or give ", need);
    spec.context = need;
  }
  if (spec.context <= 0) spec.context = need;
  QKV_CHECK(spec.context >= need, "--context ", spec.context, " is too short for the ", spec.task, " task: it needs ",
            need);
  spec.example_tokens = need;
}

LabelMetrics LabelTask::evaluate_labels(Runner& runner, int64_t count, Generator& gen, const Progress& progress) const {
  NoGradGuard no_grad;
  bool was_training = runner.module().is_training();
  runner.module().eval();
  LabelMetrics m;
  m.ranks = ranks_items();
  m.labels = labels();
  if (!m.ranks) m.confusion.assign(m.labels * m.labels, 0);
  std::vector<int64_t> popular = popular_items();
  popular.resize(std::min<size_t>(popular.size(), 10));
  std::vector<Example> held = held_out(count, gen);
  int64_t right = 0;
  for (size_t first = 0; first < held.size(); first += 256) {  // bounded memory whatever the count
    std::vector<Example> chunk(held.begin() + first, held.begin() + std::min(held.size(), first + 256));
    Tensor scores = runner.driver_as<LabelDriver>().label_scores(chunk).to(Device::cpu()).to(DType::Float64);
    const int64_t L = scores.size(1);
    const double* p = scores.data<double>();
    runner.check_outputs(p, static_cast<size_t>(scores.numel()), static_cast<size_t>(L));
    for (size_t i = 0; i < chunk.size(); ++i) {
      const double* row = p + i * L;
      const int64_t truth = chunk[i].answer.at(0);
      // Cross-entropy of the scores at the true label (items: over the items, the padding item 0 left out).
      const int64_t from = m.ranks ? 1 : 0;
      const double top = *std::max_element(row + from, row + L);
      double sum = 0;
      for (int64_t v = from; v < L; ++v) sum += std::exp(row[v] - top);
      m.loss += top + std::log(sum) - row[truth];
      if (!m.ranks) {
        int64_t best = std::max_element(row, row + L) - row;
        right += best == truth;
        ++m.confusion[truth * m.labels + best];
        continue;
      }
      // The held-out item's rank among the items (0 pads: never ranked); ties count against it.
      int64_t rank = 0;
      for (int64_t v = 1; v < L; ++v) rank += v != truth && row[v] >= row[truth];
      if (rank < 10) m.hit_rate += 1, m.ndcg += 1 / std::log2(rank + 2.0);
      auto at = std::find(popular.begin(), popular.end(), truth);
      if (at != popular.end()) m.popular_hit_rate += 1, m.popular_ndcg += 1 / std::log2((at - popular.begin()) + 2.0);
    }
    if (progress) progress(static_cast<int64_t>(first + chunk.size()), static_cast<int64_t>(held.size()), "examples");
  }
  m.examples = static_cast<int64_t>(held.size());
  const double n = std::max<double>(1, static_cast<double>(m.examples));
  m.accuracy = static_cast<double>(right) / n;
  m.hit_rate /= n, m.ndcg /= n, m.popular_hit_rate /= n, m.popular_ndcg /= n, m.loss /= n;
  runner.module().train(was_training);
  return m;
}

// Accuracy or HR@10 on up to 1,000 held-out examples.
train::Evaluation LabelTask::evaluate(Runner& runner, Generator& held_out, double target) const {
  train::Evaluation e;
  LabelMetrics m = evaluate_labels(runner, 1000, held_out, {});
  e.metric = m.metric();
  e.held_out_loss = m.loss;
  char text[128];
  if (m.ranks)
    std::snprintf(text, sizeof text, "held-out HR@10 %.4f, NDCG@10 %.4f (most popular: HR@10 %.4f)", m.hit_rate, m.ndcg,
                  m.popular_hit_rate);
  else
    std::snprintf(text, sizeof text, "held-out accuracy %.2f%% on %lld", 100 * m.accuracy,
                  static_cast<long long>(m.examples));
  e.text = text;
  e.reached = target > 0 && e.metric >= target;  // 0: no target
  return e;
}

// Accuracy and the confusion matrix (classes), or HR@10 and NDCG@10 against
// the most popular items (a recommender).
void LabelTask::print_eval(Runner& runner, const std::string& path, int64_t count, Generator& gen,
                           const Progress& progress) const {
  const LabelMetrics m = evaluate_labels(runner, count, gen, progress);
  const ModelSpec& spec = runner.spec();
  if (m.ranks) {
    std::printf("%s: %s %s, the last item of %lld held-out users, ranked among %lld items\n", printable(path).c_str(),
                spec.model.c_str(), spec.task.c_str(), static_cast<long long>(m.examples),
                static_cast<long long>(m.labels - 1));
    std::printf("  model                HR@10 %.4f  NDCG@10 %.4f\n", m.hit_rate, m.ndcg);
    std::printf("  most popular 10      HR@10 %.4f  NDCG@10 %.4f\n", m.popular_hit_rate, m.popular_ndcg);
    if (m.popular_hit_rate > 0)
      std::printf("  the model's HR@10 is %.2fx the popularity baseline's\n", m.hit_rate / m.popular_hit_rate);
    return;
  }
  std::printf("%s: %s %s, accuracy %.2f%% on %lld held-out examples\n", printable(path).c_str(), spec.model.c_str(),
              spec.task.c_str(), 100 * m.accuracy, static_cast<long long>(m.examples));
  // The matrix: one row per true label, one column per predicted label.
  size_t w = 5;
  for (int64_t k = 0; k < m.labels; ++k) w = std::max(w, label_text(k).size() + 1);
  std::printf("confusion matrix (rows: true label, columns: predicted)\n%*s", static_cast<int>(w), "");
  for (int64_t k = 0; k < m.labels; ++k) std::printf("%*s", static_cast<int>(w), label_text(k).c_str());
  std::printf("\n");
  for (int64_t t = 0; t < m.labels; ++t) {
    std::printf("%*s", static_cast<int>(w), label_text(t).c_str());
    for (int64_t k = 0; k < m.labels; ++k)
      std::printf("%*lld", static_cast<int>(w), static_cast<long long>(m.confusion[t * m.labels + k]));
    std::printf("\n");
  }
}

Example LabelTask::prompt_example(const std::string& text, std::string* what) const {
  Example e = parse_prompt(text);
  if (ranks_items()) {  // a history predicts each next item after the first
    QKV_CHECK(e.input.size() >= 2, "the history needs at least 2 items (one to predict)");
    e.answer.assign(e.input.begin() + 1, e.input.end());
    e.input.pop_back();
    if (what) *what = cat("mean cross-entropy of the ", e.answer.size(), " next items in the history");
    return e;
  }
  QKV_CHECK(e.answer.size() == 1, "the prompt gives no label: put it after the pixels (", max_input(),
            " pixels, then the label)");
  if (what) *what = cat("cross-entropy of the label ", printable(label_text(e.answer[0])));
  return e;
}

std::string LabelTask::example_prompt(Generator& gen) const {
  const std::vector<int64_t> input = held_out(1, gen).at(0).input;
  // A history's last few items are enough to ask what comes next.
  const size_t first = ranks_items() && input.size() > 5 ? input.size() - 5 : 0;
  std::string text;
  for (size_t i = first; i < input.size(); ++i)
    text += (text.empty() || !ranks_items() ? "" : " ") + token_text(input[i]);
  return text;
}

std::vector<std::pair<int64_t, double>> LabelTask::top_labels(Runner& runner, const Example& e, int64_t k) const {
  NoGradGuard no_grad;
  runner.module().eval();
  std::vector<double> scores = runner.driver_as<LabelDriver>().label_scores({e}).to_vector();
  runner.check_outputs(scores.data(), scores.size(), scores.size());
  const int64_t first = ranks_items() ? 1 : 0;  // item 0 pads
  double top = *std::max_element(scores.begin() + first, scores.end()), total = 0;
  std::vector<std::pair<int64_t, double>> out;
  for (int64_t v = first; v < static_cast<int64_t>(scores.size()); ++v) {
    double w = std::exp(scores[v] - top);
    total += w;
    out.push_back({v, w});
  }
  for (auto& [label, p] : out) p /= total;
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  out.resize(std::min<size_t>(out.size(), static_cast<size_t>(k)));
  return out;
}

// The class with its probabilities, or the 10 likeliest next items; an image is drawn first, in grey levels.
void LabelTask::print_sample(Runner& runner, const std::string& prompt, const SampleOptions&) const {
  Example e = parse_prompt(prompt);
  if (int64_t side = image_side()) {
    static const char* kShades[] = {"  ", "..", "::", "oo", "OO", "@@"};
    for (int64_t r = 0; r < side; ++r) {
      std::string line = "  ";
      for (int64_t c = 0; c < side; ++c) line += kShades[std::min<int64_t>(5, (e.input[r * side + c] * 6) / 17)];
      std::printf("%s\n", line.c_str());
    }
  }
  const bool items = ranks_items();
  std::string input;
  for (int64_t id : e.input) input += (input.empty() || !items ? "" : " ") + token_text(id);
  std::printf("%s ->", image_side() ? "image" : input.c_str());
  auto top = top_labels(runner, e, 10);
  if (items) {
    std::printf(" the 10 likeliest next items:\n");
    for (const auto& [label, p] : top) std::printf("  %-20s p %.4f\n", label_text(label).c_str(), p);
    return;
  }
  std::printf(" %s (p %.4f)", label_text(top[0].first).c_str(), top[0].second);
  for (size_t i = 1; i < top.size(); ++i)
    std::printf("%s %s %.4f", i == 1 ? "; then" : ",", label_text(top[i].first).c_str(), top[i].second);
  if (e.answer.size() == 1) std::printf("; the right label is %s", label_text(e.answer[0]).c_str());
  std::printf("\n");
}

}  // namespace qkv::cli
