#include "decoding.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace qkv::cli::decoding {

namespace {
// logits[b, t, :] of a [B, T, V] tensor; from a device, that row alone is copied over.
std::vector<double> row(const Tensor& logits, int64_t b, int64_t t) {
  if (!logits.device().is_cpu()) return row(narrow(narrow(logits, 0, b, 1), 1, t, 1).to(Device::cpu()), 0, 0);
  int64_t T = logits.size(1), V = logits.size(2);
  std::vector<double> out(V);
  const float* p = logits.data<float>() + (b * T + t) * V;
  for (int64_t v = 0; v < V; ++v) out[v] = p[v];
  return out;
}

// Decodes inputs of one length together (every row then has the same prefix length), into `answers`.
void answer_group(Runner& runner, SequenceDriver& driver, const std::vector<std::vector<int64_t>>& inputs,
                  const std::vector<size_t>& rows, double temperature, int64_t top_k, Generator* gen,
                  std::vector<std::vector<int64_t>>& answers) {
  const int64_t limit = runner.task().max_answer() + 1, B = static_cast<int64_t>(rows.size());
  std::vector<bool> done(B, false);
  std::vector<std::vector<int64_t>> group, seqs;  // the inputs; what each row's decoder has read so far
  for (size_t r : rows) group.push_back(inputs[r]), seqs.push_back(driver.decoder_start(inputs[r]));
  // A kind that keeps keys and values reads the prefix once, then one new token per step.
  std::unique_ptr<nn::KVCache> cache = runner.cache_for(B, static_cast<int64_t>(seqs[0].size()) + limit);
  auto decode = driver.decoder(group, cache.get());
  for (int64_t step = 0; step < limit; ++step) {
    int64_t T = static_cast<int64_t>(seqs[0].size());
    if (T > runner.spec().context) break;
    int64_t fed = cache ? cache->length : 0;  // tokens the model has already seen
    std::vector<int64_t> flat;
    for (const auto& s : seqs) flat.insert(flat.end(), s.begin() + fed, s.end());
    Tensor logits = decode(ids_for(runner.module(), flat, {B, T - fed}));
    T -= fed;  // the logits cover the new tokens only
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      int64_t next = done[b] ? kPad : pick(runner, row(logits, b, T - 1), temperature, top_k, gen);
      seqs[b].push_back(next);
      if (!done[b]) {
        if (next == kEos)
          done[b] = true;
        else
          answers[rows[b]].push_back(next);
      }
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
}
}  // namespace

int64_t pick(const Runner& runner, const std::vector<double>& logits, double temperature, int64_t top_k,
             Generator* gen) {
  int64_t V = static_cast<int64_t>(logits.size());
  runner.check_outputs(logits.data(), logits.size(), logits.size());
  if (temperature <= 0 || !gen) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<double> sorted = logits;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  double floor = top_k > 0 && top_k < V ? sorted[top_k - 1] : -INFINITY;
  double top = sorted[0], total = 0;
  std::vector<double> p(V, 0.0);
  for (int64_t v = 0; v < V; ++v)
    if (logits[v] >= floor) total += p[v] = std::exp((logits[v] - top) / temperature);
  double u = gen->uniform() * total;
  for (int64_t v = 0; v < V; ++v)
    if ((u -= p[v]) < 0 && p[v] > 0) return v;
  return std::max_element(p.begin(), p.end()) - p.begin();
}

std::vector<std::vector<int64_t>> answer(Runner& runner, const std::vector<std::vector<int64_t>>& inputs,
                                         double temperature, int64_t top_k, Generator* gen) {
  NoGradGuard no_grad;
  bool was_training = runner.module().is_training();
  runner.module().eval();
  SequenceDriver& driver = runner.driver_as<SequenceDriver>();
  std::vector<std::vector<int64_t>> answers(inputs.size());
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < inputs.size(); ++i) by_length[inputs[i].size()].push_back(i);
  for (const auto& [length, rows] : by_length)
    answer_group(runner, driver, inputs, rows, temperature, top_k, gen, answers);
  runner.module().train(was_training);
  return answers;
}

std::vector<int64_t> continue_text(Runner& runner, std::vector<int64_t> ids, int64_t max_new, double temperature,
                                   int64_t top_k, Generator& gen) {
  NoGradGuard no_grad;
  runner.module().eval();
  TextDriver& driver = runner.driver_as<TextDriver>();
  QKV_CHECK(!ids.empty(), "empty prompt");
  const size_t prompt_length = ids.size();
  const int64_t context = runner.spec().context;
  // With the cache each token costs one row of attention while the text fits
  // the context; past it, positions shift, so each token recomputes the last
  // `context` tokens (as without a cache).
  std::unique_ptr<nn::KVCache> cache = runner.cache_for(1, static_cast<int64_t>(ids.size()) + max_new);
  for (int64_t i = 0; i < max_new; ++i) {
    int64_t n = static_cast<int64_t>(ids.size());
    Tensor logits;
    int64_t T;
    if (cache && n <= context) {
      std::vector<int64_t> fresh(ids.begin() + cache->length, ids.end());
      T = static_cast<int64_t>(fresh.size());
      logits = driver.cached_logits(ids_for(runner.module(), fresh, {1, T}), *cache);
    } else {
      int64_t start = std::max<int64_t>(0, n - context);
      std::vector<int64_t> window(ids.begin() + start, ids.end());
      T = static_cast<int64_t>(window.size());
      logits = driver.text_logits(ids_for(runner.module(), window, {1, T}), nullptr);
    }
    int64_t next = pick(runner, row(logits, 0, T - 1), temperature, top_k, &gen);
    ids.push_back(next);
  }
  return std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt_length), ids.end());
}

}  // namespace qkv::cli::decoding
