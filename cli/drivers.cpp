#include "drivers.h"

#include <algorithm>

#include "decoding.h"
#include "nn/attention.h"
#include "runner.h"
#include "study.h"

namespace qkv::cli {

namespace {

auto first_of_batch(const Tensor& w) { return squeeze(w, 0); }  // [1, heads, rows, cols] -> [heads, rows, cols]

// What every driver does the same way with its typed model: own it, and pass
// the switches the models share on to it.
template <class Model> class TypedDriver : public ModelDriver {
 public:
  explicit TypedDriver(std::unique_ptr<Model> model) : model_(std::move(model)) {}
  nn::Module& module() override { return *model_; }
  void set_checkpoint_activations(bool on) override { model_->set_checkpoint_activations(on); }
  void set_fused_attention(bool on) override { model_->set_fused_attention(on); }

 protected:
  std::unique_ptr<Model> model_;
};

// A GPT reads `input SEP answer EOS` and learns the answer tokens; text is
// next-byte prediction; generation may keep keys and values.
class GptDriver : public TypedDriver<nn::GPT>, public SequenceDriver, public TextDriver {
 public:
  using TypedDriver::TypedDriver;

  Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) override {
    // x = input SEP answer, y = the next token; only answer and EOS positions count.
    int64_t B = static_cast<int64_t>(batch.size()), T = 0;
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
    return model_->loss(ids_for(*model_, x, {B, T}), ids_for(*model_, y, {B, T}), weights);
  }
  Tensor text_logits(const Tensor& ids, std::vector<Tensor>* weights) override { return model_->forward(ids, weights); }
  Tensor text_loss(const Tensor& ids, const Tensor& targets, std::vector<Tensor>* weights) override {
    return model_->loss(ids, targets, weights);
  }
  bool keeps_cache() const override { return true; }
  std::unique_ptr<nn::KVCache> make_cache(int64_t batch, int64_t positions) override {
    return std::make_unique<nn::KVCache>(model_->make_cache(batch, positions));
  }
  Tensor cached_logits(const Tensor& ids, nn::KVCache& cache) override { return model_->forward_cached(ids, cache); }
  std::vector<int64_t> decoder_start(const std::vector<int64_t>& input) const override {
    std::vector<int64_t> seq = input;
    seq.push_back(kSep);
    return seq;
  }
  std::function<Tensor(const Tensor&)> decoder(const std::vector<std::vector<int64_t>>&, nn::KVCache* cache) override {
    // With a cache: the prefix once, then one new token per step.
    return
        [this, cache](const Tensor& ids) { return cache ? model_->forward_cached(ids, *cache) : model_->forward(ids); };
  }

  // One map per layer over the prompt and (for a task) the model's own answer.
  std::vector<AttentionMap> attention(Runner& runner, const std::string& prompt) override {
    std::vector<int64_t> ids = runner.task().prompt_tokens(prompt);
    int64_t split = -1;
    if (runner.task().family() == TaskFamily::Sequence) {
      std::vector<int64_t> answer = decoding::answer(runner, {ids}).front();
      ids.push_back(kSep);
      split = static_cast<int64_t>(ids.size());
      ids.insert(ids.end(), answer.begin(), answer.end());
    }
    const int64_t context = runner.spec().context;
    QKV_CHECK(static_cast<int64_t>(ids.size()) <= context, "prompt of ", ids.size(), " tokens exceeds the context of ",
              context);
    std::vector<Tensor> weights = nn::record_attention([&] {
      model_->forward(ids_for(*model_, ids, {1, static_cast<int64_t>(ids.size())}));
    });
    std::vector<AttentionMap> maps = label(runner, ids, split, weights);
    for (AttentionMap& m : maps) m.weights = first_of_batch(m.weights);
    return maps;
  }
  // A task's input SEP answer (task_loss's tokens, EOS not fed), or a text's bytes.
  Tensor study_loss(Runner& runner, const Example& e) override {
    if (runner.task().family() == TaskFamily::Sequence) return task_loss({e}, nullptr);
    const int64_t T = static_cast<int64_t>(e.input.size());
    return nn::cross_entropy(model_->forward(ids_for(*model_, e.input, {1, T})), ids_for(*model_, e.answer, {1, T}));
  }
  std::vector<AttentionMap> study_maps(Runner& runner, const Example& e, const std::vector<Tensor>& weights) override {
    if (runner.task().family() != TaskFamily::Sequence) return label(runner, e.input, -1, weights);
    std::vector<int64_t> ids = e.input;
    ids.push_back(kSep);
    ids.insert(ids.end(), e.answer.begin(), e.answer.end());
    return label(runner, ids, static_cast<int64_t>(e.input.size()) + 1, weights);
  }

 private:
  // One causal map per layer over tokens `ids` (a task's symbols, or bytes).
  static std::vector<AttentionMap> label(const Runner& runner, const std::vector<int64_t>& ids, int64_t split,
                                         const std::vector<Tensor>& weights) {
    std::vector<std::string> labels;
    for (int64_t id : ids) labels.push_back(runner.task().token_text(id));
    std::vector<AttentionMap> maps;
    for (size_t l = 0; l < weights.size(); ++l) {
      maps.push_back({cat("layer ", l), cat("layer", l), weights[l], labels, labels, split});
      maps.back().causal = true;
    }
    return maps;
  }
};

// A Seq2Seq encodes the input (padding masked) and decodes `SEP answer` into
// `answer EOS` with cross-attention; it keeps no cache and reads no text.
class Seq2SeqDriver : public TypedDriver<nn::Seq2Seq>, public SequenceDriver {
 public:
  using TypedDriver::TypedDriver;

  Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) override {
    return loss(batch, nullptr, weights);
  }
  Tensor study_loss(Runner&, const Example& e) override { return loss({e}, nullptr, nullptr); }
  // The encoder's calls, then per layer the decoder's self- and cross-attention, as attention() lays them out.
  std::vector<AttentionMap> study_maps(Runner& runner, const Example& e, const std::vector<Tensor>& weights) override {
    const size_t layers = weights.size() / 3;
    QKV_CHECK(weights.size() == 3 * layers, "a Seq2Seq's study recorded ", weights.size(),
              " attention calls, not 3 per layer");
    std::vector<int64_t> tgt{kSep};
    tgt.insert(tgt.end(), e.answer.begin(), e.answer.end());
    return label(runner, e.input, tgt, {weights.begin(), weights.begin() + layers},
                 {weights.begin() + layers, weights.end()});
  }
  // Mean cross-entropy of the answers and end marks; `enc` and `dec`, when given, collect the maps.
  Tensor loss(const std::vector<Example>& batch, std::vector<Tensor>* enc, std::vector<Tensor>* dec) {
    int64_t B = static_cast<int64_t>(batch.size()), S = 0, T = 0;
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
    Tensor memory = model_->encode(ids_for(*model_, src, {B, S}), lengths, enc);
    Tensor logits = model_->decode(ids_for(*model_, tin, {B, T}), memory, lengths, dec);
    return nn::cross_entropy(logits, ids_for(*model_, tout, {B, T}));
  }
  std::vector<int64_t> decoder_start(const std::vector<int64_t>&) const override { return {kSep}; }
  std::function<Tensor(const Tensor&)> decoder(const std::vector<std::vector<int64_t>>& inputs, nn::KVCache*) override {
    // The inputs, all of one length, are encoded once; each step decodes the whole answer so far.
    int64_t B = static_cast<int64_t>(inputs.size()), L = static_cast<int64_t>(inputs.front().size());
    std::vector<int64_t> src, lengths(B, L);
    for (const auto& input : inputs) src.insert(src.end(), input.begin(), input.end());
    Tensor memory = model_->encode(ids_for(*model_, src, {B, L}), lengths);
    return [this, memory, lengths](const Tensor& ids) { return model_->decode(ids, memory, lengths); };
  }

  // Per layer: the encoder's self-attention over the input, the decoder's
  // over its own tokens, and the decoder's cross-attention to the input.
  std::vector<AttentionMap> attention(Runner& runner, const std::string& prompt) override {
    const Task& task = runner.task();
    std::vector<int64_t> src = task.prompt_tokens(prompt);
    QKV_CHECK(static_cast<int64_t>(src.size()) <= task.max_input(), "the prompt has ", src.size(),
              " symbols; this model reads at most ", task.max_input());
    // The source, then the decoder's input: the start mark and the model's answer.
    std::vector<int64_t> tgt{kSep}, answer = decoding::answer(runner, {src}).front();
    tgt.insert(tgt.end(), answer.begin(), answer.end());
    const int64_t context = runner.spec().context;
    if (static_cast<int64_t>(tgt.size()) > context) tgt.resize(context);  // an answer that never ended
    std::vector<int64_t> lengths{static_cast<int64_t>(src.size())};
    Tensor memory;
    std::vector<Tensor> enc = nn::record_attention([&] {
      memory = model_->encode(ids_for(*model_, src, {1, static_cast<int64_t>(src.size())}), lengths);
    });
    std::vector<Tensor> dec = nn::record_attention([&] {
      model_->decode(ids_for(*model_, tgt, {1, static_cast<int64_t>(tgt.size())}), memory, lengths);
    });
    std::vector<AttentionMap> maps = label(runner, src, tgt, enc, dec);
    for (AttentionMap& m : maps) m.weights = first_of_batch(m.weights);
    return maps;
  }

 private:
  static std::vector<AttentionMap> label(const Runner& runner, const std::vector<int64_t>& src,
                                         const std::vector<int64_t>& tgt, const std::vector<Tensor>& enc,
                                         const std::vector<Tensor>& dec) {
    std::vector<std::string> src_labels, tgt_labels;
    for (int64_t id : src) src_labels.push_back(runner.task().token_text(id));
    for (int64_t id : tgt) tgt_labels.push_back(runner.task().token_text(id));
    std::vector<AttentionMap> maps;
    for (size_t l = 0; l < enc.size(); ++l)
      maps.push_back({cat("encoder layer ", l), cat("encoder", l), enc[l], src_labels, src_labels});
    for (size_t l = 0; l < dec.size() / 2; ++l) {
      maps.push_back({cat("decoder layer ", l, ", self-attention"), cat("decoder", l, "_self"), dec[2 * l], tgt_labels,
                      tgt_labels});
      maps.back().causal = true;
      maps.push_back({cat("decoder layer ", l, ", cross-attention to the input"), cat("decoder", l, "_cross"),
                      dec[2 * l + 1], tgt_labels, src_labels});
    }
    return maps;
  }
};

// Token ids right-padded with 0 into [B, T] (T the longest) on the model's device, and each row's length.
Tensor padded_inputs(const nn::Module& model, const std::vector<Example>& batch, std::vector<int64_t>& lengths) {
  int64_t B = static_cast<int64_t>(batch.size()), T = 0;
  for (const Example& e : batch) T = std::max<int64_t>(T, e.input.size());
  std::vector<int64_t> ids(B * T, 0);
  lengths.assign(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(batch[b].input.begin(), batch[b].input.end(), ids.begin() + b * T);
    lengths[b] = static_cast<int64_t>(batch[b].input.size());
  }
  return ids_for(model, ids, {B, T});
}

// Each example's one label, [B], on the model's device.
Tensor class_labels(const nn::Module& model, const std::vector<Example>& batch) {
  std::vector<int64_t> y;
  for (const Example& e : batch) {
    QKV_CHECK(e.answer.size() == 1, "an example of a classification task has one label, got ", e.answer.size());
    y.push_back(e.answer[0]);
  }
  return ids_for(model, y, {static_cast<int64_t>(y.size())});
}

std::vector<std::string> token_labels(const Task& task, const std::vector<int64_t>& ids, bool cls) {
  std::vector<std::string> labels;
  if (cls) labels.push_back("[CLS]");
  for (int64_t id : ids) labels.push_back(task.token_text(id));
  return labels;
}

// What the kinds that answer with one label share: their maps.
template <class Model> class OneLabelDriver : public TypedDriver<Model>, public LabelDriver {
 public:
  using TypedDriver<Model>::TypedDriver;
  // The prompt's example, one map per layer, labelled as the kind shows its tokens.
  std::vector<AttentionMap> attention(Runner& runner, const std::string& prompt) override {
    Example e{runner.task().prompt_tokens(prompt), {}};
    std::vector<AttentionMap> maps = label(runner, e, nn::record_attention([&] { forward_maps(e); }));
    for (AttentionMap& m : maps) m.weights = first_of_batch(m.weights);
    return maps;
  }
  // task_loss's forward on one example, its maps labelled the same way.
  Tensor study_loss(Runner&, const Example& e) override { return this->task_loss({e}, nullptr); }
  std::vector<AttentionMap> study_maps(Runner& runner, const Example& e, const std::vector<Tensor>& weights) override {
    return label(runner, e, weights);
  }

 protected:
  /// The model's forward on one example (no loss: a prompt may give no label), its attention recorded.
  virtual void forward_maps(const Example& e) = 0;
  /// One map per layer of weights [1, heads, rows, cols], tokens labelled.
  virtual std::vector<AttentionMap> label(const Runner& runner, const Example& e,
                                          const std::vector<Tensor>& weights) const = 0;
};

// The BERT-style classifier: right-padded tokens, their lengths, one class each.
class EncoderDriver : public OneLabelDriver<nn::EncoderClassifier> {
 public:
  using OneLabelDriver::OneLabelDriver;
  Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) override {
    return nn::cross_entropy(logits(batch, weights), class_labels(*model_, batch));
  }
  Tensor label_scores(const std::vector<Example>& batch) override { return logits(batch, nullptr); }
  int64_t loss_positions(const Example&) const override { return 1; }

 private:
  void forward_maps(const Example& e) override { logits({e}, nullptr); }
  // One map per layer over [CLS] (with cls pooling) and the prompt's tokens.
  std::vector<AttentionMap> label(const Runner& runner, const Example& e,
                                  const std::vector<Tensor>& weights) const override {
    const bool cls = model_->config().pooling == nn::Pooling::Cls;
    std::vector<std::string> labels = token_labels(runner.task(), e.input, cls);
    std::vector<AttentionMap> maps;
    for (size_t l = 0; l < weights.size(); ++l) {
      maps.push_back({cat("layer ", l), cat("layer", l), weights[l], labels, labels});
      maps.back().cls_first = cls;
    }
    return maps;
  }
  Tensor logits(const std::vector<Example>& batch, std::vector<Tensor>* weights) {
    std::vector<int64_t> lengths;
    Tensor ids = padded_inputs(*model_, batch, lengths);
    return model_->forward(ids, lengths, weights);
  }
};

// The Vision Transformer: pixels of 17 levels scaled to [0, 1], one class each.
class ViTDriver : public OneLabelDriver<nn::ViT> {
 public:
  using OneLabelDriver::OneLabelDriver;
  Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) override {
    return nn::cross_entropy(model_->forward(images(batch), weights), class_labels(*model_, batch));
  }
  Tensor label_scores(const std::vector<Example>& batch) override { return model_->forward(images(batch)); }
  int64_t loss_positions(const Example&) const override { return 1; }

 private:
  void forward_maps(const Example& e) override { model_->forward(images({e})); }
  // One map per layer over [CLS] and the patches, with the image under the [CLS] row's grid.
  std::vector<AttentionMap> label(const Runner&, const Example& e, const std::vector<Tensor>& weights) const override {
    const int64_t side = model_->config().image, p = model_->config().patch, per_row = side / p;
    std::vector<std::string> labels{"[CLS]"};
    for (int64_t k = 0; k < per_row * per_row; ++k) labels.push_back(cat("p", k));  // patch k: row k / per_row
    std::vector<double> image = images({e}).to_vector();                            // in [0, 1], as the model sees it
    std::vector<AttentionMap> maps;
    for (size_t l = 0; l < weights.size(); ++l) {
      maps.push_back({cat("layer ", l), cat("layer", l), weights[l], labels, labels});
      AttentionMap& m = maps.back();
      m.cls_first = true, m.image = image, m.image_side = side, m.patch = p;
    }
    return maps;
  }
  Tensor images(const std::vector<Example>& batch) const {
    const int64_t side = model_->config().image, B = static_cast<int64_t>(batch.size());
    std::vector<float> pixels;
    for (const Example& e : batch) {
      QKV_CHECK(static_cast<int64_t>(e.input.size()) == side * side, "an image of ", e.input.size(),
                " pixels for a ViT of ", side, " x ", side);
      for (int64_t v : e.input) pixels.push_back(static_cast<float>(v) / 16.0f);
    }
    Tensor x = Tensor::from_vector(pixels, {B, 1, side, side});
    return x.to(model_->cls_token.dtype()).to(model_->cls_token.device());
  }
};

// The SASRec-style recommender: a history right-padded with 0; its loss
// covers the item after every position, its scores the item after the last.
class RecommenderDriver : public OneLabelDriver<nn::Recommender> {
 public:
  using OneLabelDriver::OneLabelDriver;
  Tensor task_loss(const std::vector<Example>& batch, std::vector<Tensor>* weights) override {
    std::vector<int64_t> lengths;
    Tensor ids = padded_inputs(*model_, batch, lengths);
    const int64_t B = ids.size(0), T = ids.size(1);
    std::vector<int64_t> y(B * T, -100);
    for (int64_t b = 0; b < B; ++b) {
      QKV_CHECK(batch[b].answer.size() == batch[b].input.size(), "a history of ", batch[b].input.size(),
                " items needs as many next items, got ", batch[b].answer.size());
      std::copy(batch[b].answer.begin(), batch[b].answer.end(), y.begin() + b * T);
    }
    return nn::cross_entropy(model_->forward(ids, weights), ids_for(*model_, y, {B, T}));
  }
  Tensor label_scores(const std::vector<Example>& batch) override {
    std::vector<int64_t> lengths, last;
    Tensor ids = padded_inputs(*model_, batch, lengths);
    const int64_t B = ids.size(0), T = ids.size(1);
    for (int64_t b = 0; b < B; ++b) last.push_back(b * T + lengths[b] - 1);
    Tensor scores = model_->forward(ids);
    return index_select(reshape(scores, {B * T, scores.size(2)}), 0, ids_for(*model_, last, {B}));
  }
  int64_t loss_positions(const Example& e) const override { return static_cast<int64_t>(e.answer.size()); }

 private:
  void forward_maps(const Example& e) override {
    std::vector<int64_t> lengths;
    model_->forward(padded_inputs(*model_, {e}, lengths));
  }
  // One causal map per layer over the history's items (for study(): all but its last, each predicting the next).
  std::vector<AttentionMap> label(const Runner& runner, const Example& e,
                                  const std::vector<Tensor>& weights) const override {
    std::vector<std::string> labels = token_labels(runner.task(), e.input, false);
    std::vector<AttentionMap> maps;
    for (size_t l = 0; l < weights.size(); ++l) {
      maps.push_back({cat("layer ", l), cat("layer", l), weights[l], labels, labels});
      maps.back().causal = true;
    }
    return maps;
  }
};

template <class Model, class Driver> std::unique_ptr<ModelDriver> make(std::unique_ptr<nn::Module> model) {
  auto* typed = dynamic_cast<Model*>(model.get());
  QKV_CHECK(typed, "the model built is not the kind its driver drives");
  model.release();
  return std::make_unique<Driver>(std::unique_ptr<Model>(typed));
}

}  // namespace

std::unique_ptr<ModelDriver> drive_gpt(std::unique_ptr<nn::Module> model) {
  return make<nn::GPT, GptDriver>(std::move(model));
}
std::unique_ptr<ModelDriver> drive_seq2seq(std::unique_ptr<nn::Module> model) {
  return make<nn::Seq2Seq, Seq2SeqDriver>(std::move(model));
}
std::unique_ptr<ModelDriver> drive_encoder(std::unique_ptr<nn::Module> model) {
  return make<nn::EncoderClassifier, EncoderDriver>(std::move(model));
}
std::unique_ptr<ModelDriver> drive_vit(std::unique_ptr<nn::Module> model) {
  return make<nn::ViT, ViTDriver>(std::move(model));
}
std::unique_ptr<ModelDriver> drive_recommender(std::unique_ptr<nn::Module> model) {
  return make<nn::Recommender, RecommenderDriver>(std::move(model));
}

Tensor ids_for(const nn::Module& model, const std::vector<int64_t>& ids, const Shape& shape) {
  return Tensor::from_vector(ids, shape).to(model.device());
}

}  // namespace qkv::cli
