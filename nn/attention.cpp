#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "autograd/engine.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/logical.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "nn/dropout.h"

namespace qkv::nn {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_qk(const char* op, const Tensor& q, const Tensor& k) {
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2, op, ": q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
            " need rank >= 2");
  QKV_CHECK(q.size(-1) == k.size(-1), op, ": q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
            " differ in feature size");
}
}  // namespace

// ---- scoring functions ----

Tensor dot_score(const Tensor& q, const Tensor& k) {
  check_qk("dot_score", q, k);
  return matmul(q, k, false, true);
}

Tensor scaled_dot_score(const Tensor& q, const Tensor& k) {
  check_qk("scaled_dot_score", q, k);
  return mul(matmul(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

AdditiveScore::AdditiveScore(int64_t d_q, int64_t d_k, int64_t hidden, Generator* gen) {
  w_q = register_module("w_q", std::make_shared<Linear>(d_q, hidden, false, Init::XavierUniform, gen));
  w_k = register_module("w_k", std::make_shared<Linear>(d_k, hidden, false, Init::XavierUniform, gen));
  w_v = register_module("w_v", std::make_shared<Linear>(hidden, 1, false, Init::XavierUniform, gen));
}

// Every query meets every key through broadcasting: [.., n_q, 1, h] + [.., 1, n_k, h].
Tensor AdditiveScore::forward(const Tensor& q, const Tensor& k) const {
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2, "AdditiveScore: q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
            " need rank >= 2");
  Tensor features = tanh(add(unsqueeze(w_q->forward(q), -2), unsqueeze(w_k->forward(k), -3)));
  return squeeze(w_v->forward(features), -1);
}

BilinearScore::BilinearScore(int64_t d_q, int64_t d_k, Generator* gen) {
  double bound = std::sqrt(6.0 / static_cast<double>(d_q + d_k));
  weight = register_parameter("weight", Tensor::uniform({d_q, d_k}, -bound, bound, DType::Float32, gen));
}

Tensor BilinearScore::forward(const Tensor& q, const Tensor& k) const {
  QKV_CHECK(q.dim() >= 2 && k.dim() >= 2 && q.size(-1) == weight.size(0) && k.size(-1) == weight.size(1),
            "BilinearScore(", weight.size(0), ", ", weight.size(1), "): q ", shape_str(q.shape()), " and k ",
            shape_str(k.shape()), " do not fit");
  return matmul(matmul(q, weight), k, false, true);
}

// ---- masks ----

// The position rules live in AttentionMasks (autograd/ops/attention.h), which
// the fused kernels read too: these are its dense forms.
Tensor causal_mask(int64_t n_q, int64_t n_k) {
  QKV_CHECK(n_q >= 0 && n_k >= 0, "causal_mask: negative size ", n_q, " x ", n_k);
  AttentionMasks rules;
  rules.causal = true;
  return rules.position_mask(n_q, n_k);
}

Tensor window_mask(int64_t n_q, int64_t n_k, int64_t window, bool causal) {
  QKV_CHECK(n_q >= 0 && n_k >= 0 && window >= 0, "window_mask: negative size ", n_q, " x ", n_k, " or window ", window);
  AttentionMasks rules;
  rules.causal = true, rules.window = window;
  // A band of width 0 is the diagonal (in AttentionMasks, window 0 means no band).
  if (window == 0) return logical_and(causal_mask(n_q, n_k), transpose(causal_mask(n_k, n_q), 0, 1));
  rules.causal = causal;
  return rules.position_mask(n_q, n_k);
}

Tensor key_padding_mask(const std::vector<int64_t>& lengths, int64_t n) {
  Tensor mask = Tensor::empty({static_cast<int64_t>(lengths.size()), n}, DType::Bool);
  bool* p = mask.data<bool>();
  for (size_t b = 0; b < lengths.size(); ++b) {
    QKV_CHECK(lengths[b] >= 0 && lengths[b] <= n, "key_padding_mask: length ", lengths[b], " outside [0, ", n, "]");
    for (int64_t j = 0; j < n; ++j) p[b * n + j] = j < lengths[b];
  }
  return mask;
}

namespace {
// A bool mask as an additive float mask: 0 where allowed, -inf where blocked.
Tensor additive(const Tensor& mask, DType dtype) {
  if (mask.dtype() != DType::Bool) return mask;
  return masked_fill(Tensor::zeros(mask.shape(), dtype, mask.device()), logical_not(mask), -kInf);
}
}  // namespace

Tensor merge_masks(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return logical_and(a, b);
  DType dtype = a.dtype() == DType::Bool ? b.dtype() : a.dtype();
  QKV_CHECK(is_floating(dtype), "merge_masks: masks must be bool or float, got ", dtype_name(a.dtype()), " and ",
            dtype_name(b.dtype()));
  return add(additive(a, dtype), additive(b, dtype));
}

Tensor apply_mask(const Tensor& scores, const Tensor& mask) {
  if (!mask.defined()) return scores;
  bool fits = mask.dim() <= scores.dim();
  for (int64_t i = 1; fits && i <= mask.dim(); ++i) fits = mask.size(-i) == 1 || mask.size(-i) == scores.size(-i);
  QKV_CHECK(fits, "attention: mask ", shape_str(mask.shape()), " does not broadcast to scores ",
            shape_str(scores.shape()));
  if (mask.dtype() == DType::Bool) return masked_fill(scores, logical_not(mask), -kInf);
  QKV_CHECK(mask.dtype() == scores.dtype(), "attention: float mask is ", dtype_name(mask.dtype()), " but scores are ",
            dtype_name(scores.dtype()));
  return add(scores, mask);
}

// ---- attention ----

namespace {
// The live AttentionWeightsEdit of this thread, if any, and how many calls it has seen.
struct WeightsEditState {
  std::function<Tensor(int64_t, const Tensor&)> edit;
  int64_t calls = 0;
};
thread_local WeightsEditState* weights_edit = nullptr;
// The live AttentionInputsTap of this thread, if any, and how many calls it has seen.
struct InputsTapState {
  std::function<void(int64_t, const Tensor&, const Tensor&, double)> see;
  int64_t calls = 0;
};
thread_local InputsTapState* inputs_tap = nullptr;
// The live AttentionRecording of this thread, if any.
thread_local std::function<void(const Tensor&)>* recording = nullptr;
}  // namespace

AttentionRecording::AttentionRecording(std::function<void(const Tensor&)> see) {
  QKV_CHECK(recording == nullptr, "AttentionRecording: one is already alive on this thread (recordings do not nest)");
  recording = new std::function<void(const Tensor&)>(std::move(see));
}

AttentionRecording::~AttentionRecording() {
  delete recording;
  recording = nullptr;
}

bool attention_weights_wanted() { return recording != nullptr || weights_edit != nullptr; }

void report_attention_weights(const Tensor& weights) {
  if (recording) (*recording)(weights);
}

std::vector<Tensor> record_attention(const std::function<void()>& forward) {
  std::vector<Tensor> weights;
  AttentionRecording scope([&](const Tensor& w) { weights.push_back(w); });
  forward();
  return weights;
}

AttentionInputsTap::AttentionInputsTap(std::function<void(int64_t, const Tensor&, const Tensor&, double)> see) {
  QKV_CHECK(inputs_tap == nullptr, "AttentionInputsTap: one is already alive on this thread (taps do not nest)");
  inputs_tap = new InputsTapState{std::move(see), 0};
}

AttentionInputsTap::~AttentionInputsTap() {
  delete inputs_tap;
  inputs_tap = nullptr;
}

AttentionWeightsEdit::AttentionWeightsEdit(std::function<Tensor(int64_t, const Tensor&)> edit) {
  QKV_CHECK(weights_edit == nullptr, "AttentionWeightsEdit: one is already alive on this thread (edits do not nest)");
  weights_edit = new WeightsEditState{std::move(edit), 0};
}

AttentionWeightsEdit::~AttentionWeightsEdit() {
  delete weights_edit;
  weights_edit = nullptr;
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const ScoreFn& score, const Tensor& mask,
                          double dropout_p, Generator* gen) {
  QKV_CHECK(k.dim() >= 2 && v.dim() >= 2 && k.size(-2) == v.size(-2), "attention: k ", shape_str(k.shape()), " and v ",
            shape_str(v.shape()), " must hold the same number of keys");
  Tensor weights = softmax(apply_mask(score(q, k), mask), -1);
  if (weights_edit) {
    Tensor edited = weights_edit->edit(weights_edit->calls++, weights);
    QKV_CHECK(edited.shape() == weights.shape(), "AttentionWeightsEdit: gave ", shape_str(edited.shape()),
              " for weights ", shape_str(weights.shape()));
    weights = edited;
  }
  report_attention_weights(weights);
  return {matmul(dropout(weights, dropout_p, true, gen), v), weights};
}

AttentionResult scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                             double dropout_p, Generator* gen) {
  check_qk("scaled_dot_product_attention", q, k);
  if (inputs_tap) inputs_tap->see(inputs_tap->calls++, q, k, 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  return attention(q, k, v, scaled_dot_score, mask, dropout_p, gen);
}

SingleHeadAttention::SingleHeadAttention(int64_t d_in, int64_t d_k, int64_t d_v, const SingleHeadConfig& config)
    : dropout_(config.dropout), gen_(config.gen) {
  int64_t kdim = config.kdim == 0 ? d_in : config.kdim, vdim = config.vdim == 0 ? d_in : config.vdim;
  QKV_CHECK(d_in > 0 && d_k > 0 && d_v > 0 && kdim > 0 && vdim > 0, "SingleHeadAttention: widths d_in ", d_in, ", d_k ",
            d_k, ", d_v ", d_v, ", kdim ", config.kdim, ", vdim ", config.vdim, " must be positive (kdim, vdim: or 0)");
  QKV_CHECK(dropout_ >= 0 && dropout_ <= 1, "SingleHeadAttention: dropout must be in [0, 1], got ", dropout_);
  q_proj = register_module("q_proj", std::make_shared<Linear>(d_in, d_k, config.bias, Init::Torch, gen_));
  k_proj = register_module("k_proj", std::make_shared<Linear>(kdim, d_k, config.bias, Init::Torch, gen_));
  v_proj = register_module("v_proj", std::make_shared<Linear>(vdim, d_v, config.bias, Init::Torch, gen_));
}

AttentionResult SingleHeadAttention::forward(const Tensor& x, const Tensor& mask) const {
  return forward(x, x, x, mask);
}

AttentionResult SingleHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                             const Tensor& mask) const {
  auto scope = this->scope();  // names this module in graph pictures
  auto where = [&] {
    return cat("SingleHeadAttention(d_in=", q_proj->in_features(), ", d_k=", q_proj->out_features(),
               ", d_v=", v_proj->out_features(), "): ");
  };
  auto fits = [](const Tensor& t, int64_t width) { return t.dim() >= 2 && t.size(-1) == width; };
  QKV_CHECK(fits(query, q_proj->in_features()), where(), "query ", shape_str(query.shape()), " must be [..., n_q, ",
            q_proj->in_features(), "]");
  QKV_CHECK(fits(key, k_proj->in_features()), where(), "key ", shape_str(key.shape()), " must be [..., n_k, ",
            k_proj->in_features(), "]");
  QKV_CHECK(fits(value, v_proj->in_features()) && value.size(-2) == key.size(-2), where(), "value ",
            shape_str(value.shape()), " must be [..., ", key.size(-2), ", ", v_proj->in_features(), "]");
  // The key bias shifts a query's whole row of scores, which softmax ignores (see MultiHeadAttention).
  Tensor key_bias = k_proj->bias.defined() ? k_proj->bias.detach() : Tensor();
  Tensor q = q_proj->forward(query), k, v = v_proj->forward(value);
  {
    auto projection = k_proj->scope();  // k_proj's own forward, but with the key bias detached
    k = linear(key, k_proj->weight, key_bias);
  }
  try {
    return attention(q, k, v, scaled_dot_score, mask, is_training() ? dropout_ : 0.0, gen_);
  } catch (const Error& e) {
    throw Error(where() + e.what());
  }
}

Tensor attend(const Tensor& query, const Tensor& keys, const Tensor& values, const ScoreFn& score) {
  QKV_CHECK(query.dim() == 1 && keys.dim() == 2 && values.dim() == 2, "attend: query ", shape_str(query.shape()),
            ", keys ", shape_str(keys.shape()), ", values ", shape_str(values.shape()),
            " must be [d_q], [n, d_k], [n, d_v]");
  return squeeze(attention(unsqueeze(query, 0), keys, values, score).output, 0);
}

HardAttentionResult hard_attention(const Tensor& weights, const Tensor& v, HardMode mode, Generator* gen) {
  QKV_CHECK(
      weights.dim() >= 2 && v.dim() == weights.dim() && v.size(-2) == weights.size(-1) &&
          Shape(weights.shape().begin(), weights.shape().end() - 2) == Shape(v.shape().begin(), v.shape().end() - 2),
      "hard_attention: weights ", shape_str(weights.shape()), " and v ", shape_str(v.shape()), " do not fit");
  Generator& g = gen ? *gen : default_generator();
  int64_t nq = weights.size(-2), nk = weights.size(-1), dv = v.size(-1), batch = 1;
  for (int64_t d = 0; d + 2 < weights.dim(); ++d) batch *= weights.size(d);  // (no keys: every query picks none)
  Shape index_shape(weights.shape().begin(), weights.shape().end() - 1);
  Tensor indices = Tensor::empty(index_shape, DType::Int64);
  Tensor output = Tensor::zeros({batch, nq, dv}, v.dtype());
  std::vector<double> w = weights.to_vector(), values = v.to_vector();
  int64_t* idx = indices.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < nq; ++i) {
      const double* row = w.data() + (b * nq + i) * nk;
      double total = 0;
      int64_t pick = -1;
      for (int64_t j = 0; j < nk; ++j) {
        total += row[j];
        if (row[j] > 0 && (pick < 0 || row[j] > row[pick])) pick = j;
      }
      if (mode == HardMode::Sample && pick >= 0) {
        double u = g.uniform() * total, run = 0;
        for (int64_t j = 0; j < nk; ++j)
          if (row[j] > 0 && (run += row[j]) > u) {
            pick = j;
            break;
          }
      }
      idx[b * nq + i] = pick;
      if (pick >= 0)
        for (int64_t c = 0; c < dv; ++c) output.set({b, i, c}, values[(b * nk + pick) * dv + c]);
    }
  Shape out_shape = index_shape;
  out_shape.push_back(dv);
  return {reshape(output, out_shape), indices};
}

std::vector<double> head_gate_gradient(const Tensor& weights, const Tensor& grad) {
  QKV_CHECK(weights.dim() >= 3 && grad.shape() == weights.shape(), "head_gate_gradient: weights ",
            shape_str(weights.shape()), " and grad ", shape_str(grad.shape()), " must be [..., heads, n_q, n_k] alike");
  const int64_t heads = weights.size(-3), map = weights.size(-2) * weights.size(-1);
  std::vector<double> p = weights.to_vector(), g = grad.to_vector(), sum(heads, 0.0);
  for (size_t i = 0; i < p.size(); ++i) sum[(i / map) % heads] += p[i] * g[i];
  return sum;
}

}  // namespace qkv::nn
