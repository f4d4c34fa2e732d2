#include "runner.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "io/metadata.h"

namespace qkv::cli {

namespace {
// logits[b, t, :] of a [B, T, V] tensor.
std::vector<double> row(const Tensor& logits, int64_t b, int64_t t) {
  int64_t T = logits.size(1), V = logits.size(2);
  std::vector<double> out(V);
  const float* p = logits.data<float>() + (b * T + t) * V;
  for (int64_t v = 0; v < V; ++v) out[v] = p[v];
  return out;
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
    QKV_CHECK(s.task == "text" || s.task == "copy" || s.task == "reverse" || s.task == "sort" || s.task == "add", file,
              ": unknown task '", printable(s.task), "'");
    s.max_len = integer("max_len", kMaxInputLength);
    s.digits = integer("digits", kMaxDigits);
    s.data = field("data");  // where it trained: shown, never opened (qkv reads only files the user names)
  } catch (const Error& e) {
    std::string what = e.what();
    throw Error(what.compare(0, file.size(), file) == 0
                    ? what
                    : cat(file, ": bad model description in its metadata (", what, ")"));
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

Runner::Runner(ModelSpec spec, Generator* init, bool read_text) : spec_(std::move(spec)) {
  const nn::ModelKind& kind = nn::model_kind(spec_.model);
  spec_.check_sizes();
  nn::AttentionKind::parse(spec_.attention);
  if (spec_.task == "text") {
    QKV_CHECK(spec_.model == "gpt", "the text task trains a GPT (--model gpt)");
    spec_.vocab = 256;
    if (spec_.context <= 0) spec_.context = 64;
    if (read_text) use_text(spec_.data);
  } else {
    task_ = std::make_unique<SequenceTask>(spec_.task, spec_.max_len, spec_.digits);
    spec_.vocab = task_->vocab();
    // GPT reads input SEP answer EOS; Seq2Seq's decoder reads SEP answer.
    int64_t need = spec_.model == "gpt" ? task_->max_input() + task_->max_answer() + 1
                                        : std::max(task_->max_input(), task_->max_answer() + 1);
    if (spec_.context <= 0) spec_.context = need;
    QKV_CHECK(spec_.context >= need, "--context ", spec_.context, " is too short for the ", spec_.task,
              " task: it needs ", need);
  }
  check_fits_in_memory(4.0 * static_cast<double>(spec_.parameter_count()),
                       cat("a model of ", spec_.parameter_count(), " parameters"),
                       "use a smaller --dim, --layers or --context");
  // The registry builds the kind; this program then drives it as what it is.
  std::unique_ptr<nn::Module> built = kind.build(spec_, init);
  if (auto* gpt = dynamic_cast<nn::GPT*>(built.get()))
    built.release(), gpt_.reset(gpt);
  else if (auto* s2s = dynamic_cast<nn::Seq2Seq*>(built.get()))
    built.release(), seq2seq_.reset(s2s);
  else
    throw Error(cat("the qkv program does not train model kind '", spec_.model, "'"));
}

void Runner::use_text(const std::string& path) {
  QKV_CHECK(spec_.task == "text", "--data is for text models; this is a ", spec_.task, " model");
  text_ = std::make_unique<TextTask>(path.empty() ? default_text_path() : path);
  QKV_CHECK(static_cast<int64_t>(text_->held_out().size()) > spec_.context, "--data file '", printable(text_->path()),
            "' is too short for a context of ", spec_.context, ": its held-out tenth has ", text_->held_out().size(),
            " bytes");
}

void Runner::set_checkpoint_activations(bool on) {
  if (gpt_)
    gpt_->set_checkpoint_activations(on);
  else
    seq2seq_->set_checkpoint_activations(on);
}

void Runner::set_fused_attention(bool on) {
  if (gpt_) gpt_->set_fused_attention(on);
  if (seq2seq_) seq2seq_->set_fused_attention(on);
}

bool Runner::uses_cache() const {
  return gpt_ && use_cache_ && spec_.attention != "linear";  // linear attention keeps no keys and values
}

nn::Module& Runner::module() { return gpt_ ? static_cast<nn::Module&>(*gpt_) : *seq2seq_; }

Tensor Runner::forward_gpt(const Tensor& ids, std::vector<Tensor>* weights) const {
  return gpt_->forward(ids, weights);
}

Tensor Runner::loss(const std::vector<Example>& batch) {
  int64_t B = static_cast<int64_t>(batch.size());
  if (gpt_) {
    // x = input SEP answer, y = the next token; only answer and EOS positions count.
    int64_t T = 0;
    for (const Example& e : batch) T = std::max<int64_t>(T, e.input.size() + e.answer.size() + 1);
    std::vector<int64_t> x(B * T, kPad), y(B * T, -100);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> seq = batch[b].input;
      seq.push_back(kSep);
      seq.insert(seq.end(), batch[b].answer.begin(), batch[b].answer.end());
      seq.push_back(kEos);
      for (size_t t = 0; t + 1 < seq.size(); ++t) {
        x[b * T + t] = seq[t];
        if (t + 1 > batch[b].input.size()) y[b * T + t] = seq[t + 1];
      }
    }
    std::vector<Tensor> weights;
    Tensor logits = gpt_->forward(Tensor::from_vector(x, {B, T}), entropy_weight_ != 0 ? &weights : nullptr);
    return with_entropy(nn::cross_entropy(logits, Tensor::from_vector(y, {B, T})), weights);
  }
  int64_t S = 0, T = 0;
  for (const Example& e : batch) {
    S = std::max<int64_t>(S, e.input.size());
    T = std::max<int64_t>(T, e.answer.size() + 1);
  }
  std::vector<int64_t> src(B * S, kPad), tin(B * T, kPad), tout(B * T, -100), lengths(B);
  for (int64_t b = 0; b < B; ++b) {
    const Example& e = batch[b];
    std::copy(e.input.begin(), e.input.end(), src.begin() + b * S);
    lengths[b] = static_cast<int64_t>(e.input.size());
    tin[b * T] = kSep;
    for (size_t t = 0; t < e.answer.size(); ++t) {
      tin[b * T + t + 1] = e.answer[t];
      tout[b * T + t] = e.answer[t];
    }
    tout[b * T + e.answer.size()] = kEos;
  }
  std::vector<Tensor> weights;
  Tensor memory = seq2seq_->encode(Tensor::from_vector(src, {B, S}), lengths);
  Tensor logits =
      seq2seq_->decode(Tensor::from_vector(tin, {B, T}), memory, lengths, entropy_weight_ != 0 ? &weights : nullptr);
  return with_entropy(nn::cross_entropy(logits, Tensor::from_vector(tout, {B, T})), weights);
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
  Tensor logits = gpt_->forward(Tensor::from_vector(x, {count, T}), entropy_weight_ != 0 ? &weights : nullptr);
  return with_entropy(nn::cross_entropy(logits, Tensor::from_vector(y, {count, T})), weights);
}

std::function<Tensor()> Runner::fixed_batch_loss(int64_t size, Generator gen) {
  if (task_) {
    std::vector<Example> batch;
    for (int64_t i = 0; i < size; ++i) batch.push_back(task_->sample(gen));
    return [this, batch] { return loss(batch); };
  }
  return [this, size, gen] {
    Generator replay = gen;  // the same windows every time
    return text_loss("train", size, replay);
  };
}

int64_t Runner::pick(const std::vector<double>& logits, double temperature, int64_t top_k, Generator* gen) const {
  int64_t V = static_cast<int64_t>(logits.size());
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
    int64_t B = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(length);
    std::vector<bool> done(B, false);
    Tensor memory;
    std::vector<int64_t> lengths(B, L);
    std::vector<std::vector<int64_t>> seqs(B);  // gpt: input SEP answer...; seq2seq: SEP answer...
    for (int64_t b = 0; b < B; ++b) {
      seqs[b] = gpt_ ? inputs[rows[b]] : std::vector<int64_t>{};
      seqs[b].push_back(kSep);
    }
    if (seq2seq_) {
      std::vector<int64_t> src;
      for (size_t r : rows) src.insert(src.end(), inputs[r].begin(), inputs[r].end());
      memory = seq2seq_->encode(Tensor::from_vector(src, {B, L}), lengths);
    }
    // A GPT keeps its keys and values: the prefix once, then one new token per step.
    std::unique_ptr<nn::KVCache> cache;
    if (gpt_ && uses_cache()) cache = std::make_unique<nn::KVCache>(gpt_->make_cache(B));
    for (int64_t step = 0; step < limit; ++step) {
      int64_t T = static_cast<int64_t>(seqs[0].size());
      if (T > spec_.context) break;
      int64_t fed = cache ? cache->length : 0;  // tokens the model has already seen
      std::vector<int64_t> flat;
      for (const auto& s : seqs) flat.insert(flat.end(), s.begin() + fed, s.end());
      Tensor ids = Tensor::from_vector(flat, {B, T - fed});
      Tensor logits = cache  ? gpt_->forward_cached(ids, *cache)
                      : gpt_ ? gpt_->forward(ids)
                             : seq2seq_->decode(ids, memory, lengths);
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
  }
  return static_cast<double>(right) / static_cast<double>(count);
}

double Runner::held_out_loss(int64_t windows, Generator& gen) {
  NoGradGuard no_grad;
  bool was_training = module().is_training();
  module().eval();
  double total = 0, entropy_weight = entropy_weight_;
  entropy_weight_ = 0;  // the held-out loss is the plain cross-entropy
  int64_t batches = (windows + 31) / 32;
  for (int64_t i = 0; i < batches; ++i) total += text_loss("held_out", 32, gen).item();
  entropy_weight_ = entropy_weight;
  module().train(was_training);
  return total / static_cast<double>(batches);
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
  std::unique_ptr<nn::KVCache> cache;
  if (uses_cache()) cache = std::make_unique<nn::KVCache>(gpt_->make_cache(1));
  for (int64_t i = 0; i < max_new; ++i) {
    int64_t n = static_cast<int64_t>(ids.size());
    Tensor logits;
    int64_t T;
    if (cache && n <= spec_.context) {
      std::vector<int64_t> fresh(ids.begin() + cache->length, ids.end());
      T = static_cast<int64_t>(fresh.size());
      logits = gpt_->forward_cached(Tensor::from_vector(fresh, {1, T}), *cache);
    } else {
      int64_t start = std::max<int64_t>(0, n - spec_.context);
      std::vector<int64_t> window(ids.begin() + start, ids.end());
      T = static_cast<int64_t>(window.size());
      logits = gpt_->forward(Tensor::from_vector(window, {1, T}));
    }
    int64_t next = pick(row(logits, 0, T - 1), temperature, top_k, &gen);
    ids.push_back(next);
    out += static_cast<char>(next);
  }
  return out;
}

std::vector<AttentionMap> Runner::attention(const std::string& prompt) {
  NoGradGuard no_grad;
  module().eval();
  QKV_CHECK(spec_.attention != "linear",
            "this model uses linear attention, which never forms the n x n weight "
            "matrix a map would show (train with --attention full or window:W for maps)");
  auto first = [](const Tensor& w) { return squeeze(w, 0); };  // [1, heads, rows, cols] -> [heads, rows, cols]
  std::vector<AttentionMap> maps;
  if (seq2seq_) {
    // The source, then the decoder's input: the start mark and the model's answer.
    std::vector<int64_t> src = task_->encode(prompt);
    QKV_CHECK(static_cast<int64_t>(src.size()) <= task_->max_input(), "the prompt has ", src.size(),
              " symbols; this model reads at most ", task_->max_input());
    std::vector<int64_t> tgt{kSep}, answer = this->answer({src}).front();
    tgt.insert(tgt.end(), answer.begin(), answer.end());
    if (static_cast<int64_t>(tgt.size()) > spec_.context) tgt.resize(spec_.context);  // an answer that never ended
    std::vector<std::string> src_labels, tgt_labels;
    for (int64_t id : src) src_labels.push_back(task_->token_text(id));
    for (int64_t id : tgt) tgt_labels.push_back(task_->token_text(id));
    std::vector<int64_t> lengths{static_cast<int64_t>(src.size())};
    std::vector<Tensor> enc, dec;
    Tensor memory = seq2seq_->encode(Tensor::from_vector(src, {1, static_cast<int64_t>(src.size())}), lengths, &enc);
    seq2seq_->decode(Tensor::from_vector(tgt, {1, static_cast<int64_t>(tgt.size())}), memory, lengths, &dec);
    for (size_t l = 0; l < enc.size(); ++l)
      maps.push_back({cat("encoder layer ", l), cat("encoder", l), first(enc[l]), src_labels, src_labels});
    for (size_t l = 0; l < dec.size() / 2; ++l) {
      maps.push_back({cat("decoder layer ", l, ", self-attention"), cat("decoder", l, "_self"), first(dec[2 * l]),
                      tgt_labels, tgt_labels});
      maps.push_back({cat("decoder layer ", l, ", cross-attention to the input"), cat("decoder", l, "_cross"),
                      first(dec[2 * l + 1]), tgt_labels, src_labels});
    }
    return maps;
  }
  std::vector<int64_t> ids;
  std::vector<std::string> labels;
  int64_t split = -1;
  if (task_) {
    ids = task_->encode(prompt);
    ids.push_back(kSep);
    std::vector<int64_t> answer = this->answer({task_->encode(prompt)}).front();
    split = static_cast<int64_t>(ids.size());
    ids.insert(ids.end(), answer.begin(), answer.end());
    for (int64_t id : ids) labels.push_back(task_->token_text(id));
  } else {
    for (char c : prompt) {
      ids.push_back(static_cast<unsigned char>(c));
      labels.push_back(std::string(1, c));
    }
  }
  QKV_CHECK(static_cast<int64_t>(ids.size()) <= spec_.context, "prompt of ", ids.size(),
            " tokens exceeds the context of ", spec_.context);
  std::vector<Tensor> weights;
  gpt_->forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}), &weights);
  for (size_t l = 0; l < weights.size(); ++l)
    maps.push_back({cat("layer ", l), cat("layer", l), first(weights[l]), labels, labels, split});
  return maps;
}

}  // namespace qkv::cli
