#include "runner.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "io/metadata.h"

namespace qkv::cli {

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

// The error of a checkpoint whose description qkv cannot use: `what`, naming
// the file (`file`, printable) once.
Error bad_description(const std::string& file, const std::string& what) {
  return Error(what.compare(0, file.size(), file) == 0
                   ? what
                   : cat(file, ": bad model description in its metadata (", what, ")"));
}

}  // namespace

std::map<std::string, std::string> ModelSpec::metadata() const {
  std::map<std::string, std::string> task_fields{
      {"name", task}, {"max_len", std::to_string(max_len)}, {"digits", std::to_string(digits)}, {"data", data}};
  return {{"qkv.model", model}, {"qkv.config", io::json_object(fields())}, {"qkv.task", io::json_object(task_fields)}};
}

ModelSpec ModelSpec::from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  const std::string file = printable(path);
  auto need = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    QKV_CHECK(it != meta.end(), file, ": not a qkv model checkpoint (no ", key, " in its metadata)");
    return it->second;
  };
  ModelSpec s;
  try {
    s.model = need("qkv.model");
    nn::model_kind(s.model);  // a kind qkv knows
    static_cast<nn::ModelShape&>(s) = nn::ModelShape::from_fields(io::parse_json_object(need("qkv.config")), file);
    auto task = io::parse_json_object(need("qkv.task"));
    auto field = [&](const char* key) -> const std::string& {
      auto it = task.find(key);
      QKV_CHECK(it != task.end(), file, ": bad model description in its metadata (no ", key, ")");
      return it->second;
    };
    auto integer = [&](const char* key, int64_t high) {
      int64_t v = 0;
      QKV_CHECK(io::parse_integer(field(key), v) && v >= 1 && v <= high, file,
                ": bad model description in its metadata (", key, " = '", printable(field(key)),
                "', expected an integer in [1, ", high, "])");
      return v;
    };
    s.task = field("name");
    QKV_CHECK(s.task == "text" || s.task == "copy" || s.task == "reverse" || s.task == "sort" || s.task == "add" ||
                  is_label_task(s.task),
              file, ": unknown task '", printable(s.task), "'");
    QKV_CHECK(learns(driver_kind(s.model), s.task), file, ": a ", s.model, " model does not learn the ", s.task,
              " task");
    nn::model_kind(s.model).check(s, file);  // the fields this kind needs, before its formula reads them
    s.max_len = integer("max_len", kMaxInputLength);
    s.digits = integer("digits", kMaxDigits);
    s.data = field("data");  // where it trained: shown, never opened (qkv reads only files the user names)
    s.source = path;
  } catch (const Error& e) {
    throw bad_description(file, e.what());
  }
  return s;
}

int64_t ModelSpec::parameter_count() const { return nn::model_kind(model).parameter_count(*this); }

void ModelSpec::check_sizes() const {
  check_flags();
  check_range("max-len", max_len, 1, kMaxInputLength);
  check_range("digits", digits, 1, kMaxDigits);
}

void ModelSpec::check_tensors(const io::TensorFile& file, const std::string& path) const {
  int64_t held = 0;
  for (const auto& [name, t] : file.tensors)
    if (name.compare(0, 10, "optimizer.") != 0) held += t.numel();
  QKV_CHECK(held == parameter_count(), printable(path), ": its metadata describes a ", model, " of ", parameter_count(),
            " parameters (width ", width, ", ", layers, " layers, vocab ", vocab, ", context ", context,
            ") but it holds ", held);
}

ModelSpec small_model_spec(const std::string& kind) {
  ModelSpec spec;
  const std::string tasks = driver_kind(kind).tasks;
  spec.model = kind, spec.task = tasks.substr(0, tasks.find(',')), spec.max_len = 4;
  spec.width = 8, spec.heads = 2, spec.layers = 2;
  if (kind == "vit") spec.patch = 4;  // 4 patches of 4 x 4: small enough to check entry by entry
  return spec;
}

Runner::Runner(ModelSpec spec, Generator* init, bool read_text, const std::function<void(const ModelSpec&)>& check)
    : spec_(std::move(spec)) {
  // A checkpoint's description can still fail the task's own checks (a
  // context too short for it, a max_len under the task's least): the error
  // then names the file, and the data (the user's, never the file's) is
  // read once the description has passed, so its errors name only the data.
  const bool from_file = !spec_.source.empty();
  try {
    resolve_task(read_text && !from_file);
  } catch (const Error& e) {
    if (!from_file) throw;
    throw bad_description(printable(spec_.source), e.what());
  }
  if (from_file && read_text && (spec_.task == "text" || spec_.task == "digits")) use_data(spec_.data);
  check_fits_in_memory(4.0 * static_cast<double>(spec_.parameter_count()),
                       cat("a model of ", spec_.parameter_count(), " parameters"),
                       "use a smaller --dim, --layers or --context");
  if (check) check(spec_);
  // The registry builds the kind; this program then drives it through its row of drivers.cpp.
  driver_ = driver_kind(spec_.model).make(nn::model_kind(spec_.model).build(spec_, init));
}

void Runner::resolve_task(bool read_data) {
  const nn::ModelKind& kind = nn::model_kind(spec_.model);
  spec_.check_sizes();
  nn::AttentionKind::parse(spec_.attention);
  const DriverKind& driver = driver_kind(spec_.model);
  QKV_CHECK(learns(driver, spec_.task), "--model ", spec_.model, " learns ", driver.tasks, "; the ", spec_.task,
            " task trains --model ", default_kind(spec_.task));
  if (spec_.task == "text") {
    spec_.vocab = 256;
    if (spec_.context <= 0) spec_.context = 64;
    if (read_data) use_data(spec_.data);
  } else if (is_label_task(spec_.task)) {
    labels_ = make_label_task(spec_.task, spec_.max_len, spec_.data, read_data, spec_.image > 0 ? spec_.image : 8);
    spec_.vocab = labels_->vocab();
    if (spec_.model != "recommender" && spec_.classes == 0) spec_.classes = labels_->labels();
    // A checkpoint's classes must be the task's: scores past them would index past the confusion matrix.
    QKV_CHECK(spec_.model == "recommender" || spec_.classes == labels_->labels(), "a ", spec_.model, " of ",
              spec_.classes, " classes for the ", spec_.task, " task, which has ", labels_->labels());
    if (spec_.model == "vit" && spec_.image == 0) spec_.image = labels_->image_side();
    if (spec_.model == "vit" && spec_.patch == 0) spec_.patch = 2;
    kind.check(spec_, cat("--model ", spec_.model));
    int64_t need = driver.label_context(spec_, *labels_);
    // A ViT reads its patches and [CLS] whatever a context says: another --context is refused rather than
    // recorded (info showed it, the memory estimate counted it); a file that recorded one reads what it reads.
    if (spec_.model == "vit" && spec_.context > 0 && spec_.context != need) {
      QKV_CHECK(!spec_.source.empty(), "--context ", spec_.context, ": a ViT reads ", need, " tokens (", need - 1,
                " patches and [CLS]): leave --context out, or give ", need);
      spec_.context = need;
    }
    if (spec_.context <= 0) spec_.context = need;
    QKV_CHECK(spec_.context >= need, "--context ", spec_.context, " is too short for the ", spec_.task,
              " task: it needs ", need);
    spec_.example_tokens = need;
  } else {
    task_ = std::make_unique<SequenceTask>(spec_.task, spec_.max_len, spec_.digits);
    spec_.vocab = task_->vocab();
    int64_t need = driver.context_for(*task_);  // what this kind reads around the input and the answer
    if (spec_.context <= 0) spec_.context = need;
    QKV_CHECK(spec_.context >= need, "--context ", spec_.context, " is too short for the ", spec_.task,
              " task: it needs ", need);
    spec_.example_tokens = need;  // a longer context adds positions, not work
  }
}

void Runner::use_data(const std::string& path) {
  QKV_CHECK(spec_.task == "text" || spec_.task == "digits", "--data is for text and digits models; this is a ",
            spec_.task, " model");
  if (spec_.task == "digits") {
    labels_ = make_label_task(spec_.task, spec_.max_len, path, true);
    QKV_CHECK(labels_->image_side() == spec_.image, "--data file '", printable(path), "' holds images of ",
              labels_->image_side(), " x ", labels_->image_side(), "; this model reads ", spec_.image, " x ",
              spec_.image);
    return;
  }
  text_ = std::make_unique<TextTask>(path.empty() ? default_text_path() : path);
  QKV_CHECK(static_cast<int64_t>(text_->held_out().size()) > spec_.context, "--data file '", printable(text_->path()),
            "' is too short for a context of ", spec_.context, ": its held-out tenth has ", text_->held_out().size(),
            " bytes");
}

void Runner::set_checkpoint_activations(bool on) { driver_->set_checkpoint_activations(on); }

void Runner::set_fused_attention(bool on) { driver_->set_fused_attention(on); }

bool Runner::uses_cache() const {
  return driver_->keeps_cache() && use_cache_ && spec_.attention != "linear";  // linear attention keeps none
}

double training_bytes(const ModelSpec& s, int64_t batch) {
  const double tokens = static_cast<double>(s.example_tokens > 0 ? s.example_tokens : s.context);
  return training_step_bytes(static_cast<double>(s.parameter_count()), static_cast<double>(batch) * tokens,
                             static_cast<double>(s.layers) * driver_kind(s.model).blocks_per_layer,
                             static_cast<double>(s.width), static_cast<double>(s.vocab),
                             2.0 * static_cast<double>(s.heads) * tokens);
}

double forward_bytes(const ModelSpec& s, int64_t batch) {
  return 4.0 * static_cast<double>(batch) * static_cast<double>(s.context) *
         (2.0 * static_cast<double>(s.vocab) + 16.0 * static_cast<double>(s.width));
}

// Sized by what decoding needs, not by the context: a file's context of 2^20 once
// made a 3-digit prompt allocate 1 GB (and eval 138 GB) of zeros.
std::unique_ptr<nn::KVCache> Runner::cache_for(int64_t batch, int64_t positions) {
  if (!uses_cache()) return nullptr;
  positions = std::min(positions, spec_.context);
  if (device().is_cpu())  // (a device's memory is its allocator's to refuse)
    check_fits_in_memory(
        2.0 * 4 * static_cast<double>(spec_.layers) * static_cast<double>(batch) * static_cast<double>(positions) *
            static_cast<double>(spec_.width),
        cat(spec_.source.empty() ? std::string("this model") : printable(spec_.source), ": its key/value cache for ",
            batch, " sequence", batch == 1 ? "" : "s", " of ", positions, " tokens"),
        "use a shorter --prompt or a smaller --max-new, or a machine with more memory");
  return driver_->make_cache(batch, positions);
}

nn::Module& Runner::module() { return driver_->module(); }

void Runner::to(Device device) { module().to(device); }

Tensor Runner::forward_gpt(const Tensor& ids, std::vector<Tensor>* weights) const {
  return driver_->text_logits(ids, weights);
}

Tensor Runner::loss(const std::vector<Example>& batch) {
  std::vector<Tensor> weights;
  Tensor loss = driver_->task_loss(batch, entropy_weight_ != 0 ? &weights : nullptr);
  return with_entropy(loss, weights);
}

Tensor Runner::with_entropy(const Tensor& loss, const std::vector<Tensor>& weights) {
  if (entropy_weight_ == 0) return loss;
  Tensor entropy = nn::attention_entropy(weights);
  last_entropy_ = entropy.item();
  return add(loss, mul(entropy, entropy_weight_));
}

Tensor Runner::text_loss(const std::string& split, int64_t batch, Generator& gen, int64_t first, int64_t count) {
  QKV_CHECK(text_ != nullptr, "this text model has no text loaded (--data FILE)");
  const std::string& text = split == "train" ? text_->train() : text_->held_out();
  if (count < 0) count = batch - first;
  QKV_CHECK(first >= 0 && count > 0 && first + count <= batch, "text_loss: windows [", first, ", ", first + count,
            ") of ", batch);
  int64_t T = spec_.context, span = static_cast<int64_t>(text.size()) - T - 1;
  std::vector<int64_t> x(count * T), y(count * T);
  for (int64_t b = 0; b < batch; ++b) {  // every window is drawn, so the stream does not depend on the slice
    int64_t start = span > 0 ? static_cast<int64_t>(gen.below(span + 1)) : 0;
    if (b < first || b >= first + count) continue;
    for (int64_t t = 0; t < T; ++t) {
      x[(b - first) * T + t] = static_cast<unsigned char>(text[start + t]);
      y[(b - first) * T + t] = static_cast<unsigned char>(text[start + t + 1]);
    }
  }
  std::vector<Tensor> weights;
  Tensor logits = driver_->text_logits(ids_for(module(), x, {count, T}), entropy_weight_ != 0 ? &weights : nullptr);
  return with_entropy(nn::cross_entropy(logits, ids_for(module(), y, {count, T})), weights);
}

Example Runner::draw(Generator& gen) const {
  QKV_CHECK(task_ || labels_, "the ", spec_.task, " task draws no examples");
  return task_ ? task_->sample(gen) : labels_->sample(gen);
}

int64_t Runner::loss_positions(const Example& e) const { return driver_->loss_positions(e); }

std::function<Tensor()> Runner::fixed_batch_loss(int64_t size, Generator gen) {
  if (task_ || labels_) {
    std::vector<Example> batch;
    for (int64_t i = 0; i < size; ++i) batch.push_back(draw(gen));
    return [this, batch] { return loss(batch); };
  }
  return [this, size, gen] {
    Generator replay = gen;  // the same windows every time
    return text_loss("train", size, replay);
  };
}

void Runner::check_outputs(const double* values, size_t n, size_t row) const {
  // Weights near float's limit pass the load's finiteness check and overflow here: garbage, not an answer.
  // (-inf is a score that rules an entry out, but a row of nothing else rules out everything.)
  for (size_t i = 0; i < n; ++i) QKV_CHECK(!std::isnan(values[i]) && values[i] != INFINITY, not_finite(values[i]));
  for (size_t at = 0; row > 0 && at < n; at += row)
    QKV_CHECK(*std::max_element(values + at, values + std::min(n, at + row)) > -INFINITY, not_finite(-INFINITY));
}

std::string Runner::not_finite(double value) const {
  if (spec_.source.empty()) return cat("the model's outputs reach ", value, ": its weights overflow float32");
  return cat(printable(spec_.source), ": its outputs reach ", value,
             ": weights this large overflow float32 (the file does not hold a usable model)");
}

int64_t Runner::pick(const std::vector<double>& logits, double temperature, int64_t top_k, Generator* gen) const {
  int64_t V = static_cast<int64_t>(logits.size());
  check_outputs(logits.data(), logits.size(), logits.size());
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

std::vector<std::vector<int64_t>> Runner::answer(const std::vector<std::vector<int64_t>>& inputs, double temperature,
                                                 int64_t top_k, Generator* gen) {
  NoGradGuard no_grad;
  bool was_training = module().is_training();
  module().eval();
  std::vector<std::vector<int64_t>> answers(inputs.size());
  // Inputs of one length decode together: every row then has the same prefix length.
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < inputs.size(); ++i) by_length[inputs[i].size()].push_back(i);
  int64_t limit = task_->max_answer() + 1;
  for (const auto& [length, rows] : by_length) {
    int64_t B = static_cast<int64_t>(rows.size());
    std::vector<bool> done(B, false);
    std::vector<std::vector<int64_t>> group, seqs;  // the inputs; what each row's decoder has read so far
    for (size_t r : rows) group.push_back(inputs[r]), seqs.push_back(driver_->decoder_start(inputs[r]));
    // A kind that keeps keys and values reads the prefix once, then one new token per step.
    std::unique_ptr<nn::KVCache> cache = cache_for(B, static_cast<int64_t>(seqs[0].size()) + limit);
    auto decode = driver_->decoder(group, cache.get());
    for (int64_t step = 0; step < limit; ++step) {
      int64_t T = static_cast<int64_t>(seqs[0].size());
      if (T > spec_.context) break;
      int64_t fed = cache ? cache->length : 0;  // tokens the model has already seen
      std::vector<int64_t> flat;
      for (const auto& s : seqs) flat.insert(flat.end(), s.begin() + fed, s.end());
      Tensor ids = ids_for(module(), flat, {B, T - fed});
      Tensor logits = decode(ids);
      T -= fed;  // the logits cover the new tokens only
      bool all_done = true;
      for (int64_t b = 0; b < B; ++b) {
        int64_t next = done[b] ? kPad : pick(row(logits, b, T - 1), temperature, top_k, gen);
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
  module().train(was_training);
  return answers;
}

double Runner::accuracy(int64_t count, Generator& gen) {
  // In chunks of 1024 examples, so memory stays bounded whatever the count.
  int64_t right = 0;
  for (int64_t done = 0; done < count;) {
    int64_t n = std::min<int64_t>(1024, count - done);
    std::vector<Example> examples;
    std::vector<std::vector<int64_t>> inputs;
    for (int64_t i = 0; i < n; ++i) {
      examples.push_back(task_->sample(gen));
      inputs.push_back(examples.back().input);
    }
    std::vector<std::vector<int64_t>> got = answer(inputs);
    for (int64_t i = 0; i < n; ++i) right += got[i] == examples[i].answer;
    done += n;
    if (on_progress) on_progress(done, count);
  }
  return static_cast<double>(right) / static_cast<double>(count);
}

double Runner::held_out_loss(int64_t windows, Generator& gen) {
  NoGradGuard no_grad;
  bool was_training = module().is_training();
  module().eval();
  double total = 0, entropy_weight = entropy_weight_;
  entropy_weight_ = 0;  // the held-out loss is the plain cross-entropy
  // Batches of 32 windows, the last of what is left: --examples 1 once scored 32 windows and said 1.
  for (int64_t done = 0; done < windows;) {
    const int64_t size = std::min<int64_t>(32, windows - done);
    total += text_loss("held_out", size, gen).item() * static_cast<double>(size);
    done += size;
    if (on_progress) on_progress(done, windows);
  }
  entropy_weight_ = entropy_weight;
  module().train(was_training);
  QKV_CHECK(std::isfinite(total), not_finite(total));
  return total / static_cast<double>(windows);
}

LabelMetrics Runner::evaluate_labels(int64_t count, Generator& gen) {
  QKV_CHECK(labels_ != nullptr, "the ", spec_.task, " task has no labels to evaluate");
  NoGradGuard no_grad;
  bool was_training = module().is_training();
  module().eval();
  LabelMetrics m;
  m.ranks = labels_->ranks_items();
  m.labels = labels_->labels();
  if (!m.ranks) m.confusion.assign(m.labels * m.labels, 0);
  std::vector<int64_t> popular = labels_->popular_items();
  popular.resize(std::min<size_t>(popular.size(), 10));
  std::vector<Example> held = labels_->held_out(count, gen);
  int64_t right = 0;
  for (size_t first = 0; first < held.size(); first += 256) {  // bounded memory whatever the count
    std::vector<Example> chunk(held.begin() + first, held.begin() + std::min(held.size(), first + 256));
    Tensor scores = driver_->label_scores(chunk).to(Device::cpu()).to(DType::Float64);
    const int64_t L = scores.size(1);
    const double* p = scores.data<double>();
    check_outputs(p, static_cast<size_t>(scores.numel()), static_cast<size_t>(L));
    for (size_t i = 0; i < chunk.size(); ++i) {
      const double* row = p + i * L;
      const int64_t truth = chunk[i].answer.at(0);
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
    if (on_progress) on_progress(static_cast<int64_t>(first + chunk.size()), static_cast<int64_t>(held.size()));
  }
  m.examples = static_cast<int64_t>(held.size());
  const double n = std::max<double>(1, static_cast<double>(m.examples));
  m.accuracy = static_cast<double>(right) / n;
  m.hit_rate /= n, m.ndcg /= n, m.popular_hit_rate /= n, m.popular_ndcg /= n;
  module().train(was_training);
  return m;
}

std::vector<std::pair<int64_t, double>> Runner::top_labels(const Example& e, int64_t k) {
  NoGradGuard no_grad;
  module().eval();
  std::vector<double> scores = driver_->label_scores({e}).to_vector();
  check_outputs(scores.data(), scores.size(), scores.size());
  const int64_t first = labels_->ranks_items() ? 1 : 0;  // item 0 pads
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

std::string Runner::continue_text(const std::string& prompt, int64_t max_new, double temperature, int64_t top_k,
                                  Generator& gen) {
  NoGradGuard no_grad;
  module().eval();
  std::vector<int64_t> ids;
  for (char c : prompt) ids.push_back(static_cast<unsigned char>(c));
  QKV_CHECK(!ids.empty(), "empty prompt");
  std::string out;
  // With the cache each token costs one row of attention while the text fits
  // the context; past it, positions shift, so each token recomputes the last
  // `context` bytes (as without a cache).
  std::unique_ptr<nn::KVCache> cache = cache_for(1, static_cast<int64_t>(ids.size()) + max_new);
  for (int64_t i = 0; i < max_new; ++i) {
    int64_t n = static_cast<int64_t>(ids.size());
    Tensor logits;
    int64_t T;
    if (cache && n <= spec_.context) {
      std::vector<int64_t> fresh(ids.begin() + cache->length, ids.end());
      T = static_cast<int64_t>(fresh.size());
      logits = driver_->cached_logits(ids_for(module(), fresh, {1, T}), *cache);
    } else {
      int64_t start = std::max<int64_t>(0, n - spec_.context);
      std::vector<int64_t> window(ids.begin() + start, ids.end());
      T = static_cast<int64_t>(window.size());
      logits = driver_->text_logits(ids_for(module(), window, {1, T}), nullptr);
    }
    int64_t next = pick(row(logits, 0, T - 1), temperature, top_k, &gen);
    ids.push_back(next);
    out += static_cast<char>(next);
  }
  return out;
}

Example Runner::prompt_example(const std::string& text, std::string* what) const {
  if (spec_.task == "text") {  // next-byte prediction: the bytes, and each one's successor
    QKV_CHECK(text.size() >= 2, "the text needs at least 2 bytes (one prediction)");
    int64_t T = std::min<int64_t>(static_cast<int64_t>(text.size()) - 1, spec_.context);
    Example e;
    for (int64_t t = 0; t < T; ++t) {
      e.input.push_back(static_cast<unsigned char>(text[t]));
      e.answer.push_back(static_cast<unsigned char>(text[t + 1]));
    }
    // A longer text is cut to the context, and says so (it once was, silently).
    if (what)
      *what = cat("mean next-byte cross-entropy over ", T, " predictions",
                  T + 1 < static_cast<int64_t>(text.size())
                      ? cat(" (the first ", T + 1, " of its ", text.size(), " bytes: the model's context is ", T, ")")
                      : std::string());
    return e;
  }
  if (labels_) {
    Example e = labels_->parse_prompt(text);
    if (labels_->ranks_items()) {  // a history predicts each next item after the first
      QKV_CHECK(e.input.size() >= 2, "the history needs at least 2 items (one to predict)");
      e.answer.assign(e.input.begin() + 1, e.input.end());
      e.input.pop_back();
      if (what) *what = cat("mean cross-entropy of the ", e.answer.size(), " next items in the history");
      return e;
    }
    QKV_CHECK(e.answer.size() == 1, "the prompt gives no label: put it after the pixels (", labels_->max_input(),
              " pixels, then the label)");
    if (what) *what = cat("cross-entropy of the label ", printable(labels_->label_text(e.answer[0])));
    return e;
  }
  // A task model: the correct answer to the input (teacher forcing).
  Example e;
  e.input = task_->encode(text);
  QKV_CHECK(static_cast<int64_t>(e.input.size()) <= task_->max_input(), "the input has ", e.input.size(),
            " symbols; this model reads at most ", task_->max_input());
  e.answer = task_->solve(e.input);
  if (what)
    *what = cat("cross-entropy of the answer ", printable(task_->answer_text(e.answer)), " (", e.answer.size() + 1,
                " tokens with the end mark)");
  return e;
}

Study Runner::study(const std::string& prompt) {
  QKV_CHECK(spec_.attention != "linear",
            "this model uses linear attention, which never forms the n x n weights a study shows "
            "(train with --attention full or window:W)");
  module().eval();
  Study s;
  Example e = prompt_example(prompt, &s.what);
  s.loss = driver_->study(*this, e, s.maps);
  for (AttentionMap& m : s.maps)
    if (m.weights.requires_grad()) m.weights.retain_grad();  // dL/dP, once backward() has run (none under NoGradGuard)
  return s;
}

std::vector<AttentionMap> Runner::attention(const std::string& prompt) {
  NoGradGuard no_grad;
  module().eval();
  QKV_CHECK(spec_.attention != "linear",
            "this model uses linear attention, which never forms the n x n weight "
            "matrix a map would show (train with --attention full or window:W for maps)");
  return driver_->attention(*this, prompt);
}

}  // namespace qkv::cli
