// The attention models of the PyTorch tutorials, written in qkv.
//
// tests/fixtures/make_fixtures.py holds each model as its tutorial writes it
// (SelfAttention, SelfAttentionV2, MultiHeadAttention with W_q/W_k/W_v/W_o,
// ScaledDotProductAttention, d2l's AdditiveAttention, ...) and saved their
// weights, inputs and outputs in tests/fixtures/tutorial_models.safetensors.
// Here each is built with qkv's modules, given the same weights, run in
// float64, printed, and checked against PyTorch's numbers (to 1e-10 of the
// output's scale). The program exits 1 when any model disagrees.
// docs/from-pytorch.md shows each PyTorch snippet beside its qkv form.
//
//   tutorial_models [FIXTURE]   (default: the repository's fixture)
#include <cmath>
#include <cstdio>
#include <string>

#include "nn/checkpoint.h"
#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;
using namespace qkv::io;

namespace {

TensorFile fixture;
int failures = 0;

Tensor get(const std::string& name) {
  Tensor t = fixture.get(name);
  if (!t.defined()) throw Error("the fixture has no tensor '" + name + "'");
  return t;
}

/// Prints and checks max |ours − PyTorch's| against 1e-10 of PyTorch's largest magnitude.
void check(const std::string& what, const Tensor& ours, const Tensor& theirs) {
  std::vector<double> a = ours.to_vector(), b = theirs.to_vector();
  double worst = ours.shape() == theirs.shape() ? 0 : NAN, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) worst = d;
    scale = std::max(scale, std::fabs(b[i]));
  }
  bool ok = worst <= 1e-10 * std::max(scale, 1e-300);
  failures += !ok;
  std::printf("  %-28s %-16s max |qkv - PyTorch| = %.1e  %s\n", what.c_str(), shape_str(ours.shape()).c_str(), worst,
              ok ? "ok" : "DIFFERS");
}

/// The start of the first output row, so the numbers are on the screen.
void show(const Tensor& t) {
  std::vector<double> v = t.to_vector();
  std::printf("  first row:");
  for (int64_t i = 0; i < std::min<int64_t>(t.size(-1), 8); ++i) std::printf(" %+.4f", v[i]);
  std::printf(t.size(-1) > 8 ? " ...\n" : "\n");
}

void set(const Tensor& param, const Tensor& value) { param.assign_(value.to(param.dtype())); }

// SelfAttention(d_in=4, d_out_kq=5, d_out_v=3): one head whose query/key and
// value widths differ; the tutorial's W is used as x @ W, qkv's Linear
// weight as x·Wᵀ, so the weights move transposed.
void self_attention() {
  std::printf("SelfAttention(4, 5, 3) on [3, 2, 4]: SingleHeadAttention(4, 5, 3)\n");
  SingleHeadAttention head(4, 5, 3);
  head.to(DType::Float64);
  set(head.q_proj->weight, transpose(get("self_attention:w.W_query"), 0, 1));
  set(head.k_proj->weight, transpose(get("self_attention:w.W_key"), 0, 1));
  set(head.v_proj->weight, transpose(get("self_attention:w.W_value"), 0, 1));
  Tensor out = head.forward(get("self_attention:x")).output;
  show(out);
  check("output", out, get("self_attention:out"));
}

// SelfAttentionV2(2, 2, 2): nn.Linear projections, masked_fill(mask == 0,
// -inf) for padding, nn.Dropout(0.5) on the weights.
void self_attention_v2() {
  std::printf(
      "SelfAttentionV2(2, 2, 2) on [3, 4, 2], padding rows 1110, 1100, 1000: "
      "SingleHeadAttention(2, 2, 2, {.dropout = 0.5})\n");
  SingleHeadAttention head(2, 2, 2, {.dropout = 0.5});
  head.to(DType::Float64);
  set(head.q_proj->weight, get("self_attention_v2:w.W_query.weight"));
  set(head.k_proj->weight, get("self_attention_v2:w.W_key.weight"));
  set(head.v_proj->weight, get("self_attention_v2:w.W_value.weight"));
  Tensor x = get("self_attention_v2:x");
  // qkv's bool masks mean true = may attend: the tutorial's mask == 1, one row of keys per sequence.
  Tensor mask = reshape(equal(get("self_attention_v2:mask"), 1), {3, 1, 4});
  head.eval();
  AttentionResult r = head.forward(x, mask);
  show(r.output);
  check("output (eval)", r.output, get("self_attention_v2:out"));
  check("weights (eval)", r.weights, get("self_attention_v2:weights"));
  // Training mode: inverted dropout keeps each weight with probability 1/2
  // and doubles it. Every output row must be Σ_j keep_j · 2·w_ij · v_j for
  // some keep pattern (masks come from qkv's generator, not PyTorch's).
  head.train();
  Tensor dropped = head.forward(x, mask).output;
  Tensor v = head.v_proj->forward(x);
  int64_t rows_explained = 0, kept = 0, weights_seen = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 4; ++i) {
      bool found = false;
      for (int pattern = 0; pattern < 16 && !found; ++pattern) {
        double err = 0;
        for (int64_t c = 0; c < 2; ++c) {
          double sum = 0;
          for (int64_t j = 0; j < 4; ++j)
            if (pattern >> j & 1) sum += 2 * r.weights.at({b, i, j}) * v.at({b, j, c});
          err = std::max(err, std::fabs(sum - dropped.at({b, i, c})));
        }
        if (err <= 1e-12) {
          found = true;
          for (int64_t j = 0; j < 4; ++j)
            if (r.weights.at({b, i, j}) > 0) kept += pattern >> j & 1, ++weights_seen;
        }
      }
      rows_explained += found;
    }
  bool ok = rows_explained == 12;
  failures += !ok;
  std::printf("  %-28s %lld of 12 rows are kept weights x 2 (%lld of %lld non-zero weights kept)  %s\n",
              "dropout (train)", static_cast<long long>(rows_explained), static_cast<long long>(kept),
              static_cast<long long>(weights_seen), ok ? "ok" : "DIFFERS");
}

/// splitmix64(seed + i·golden) as uniform values in [-bound, bound): the
/// same formula as make_fixtures.py's splitmix_uniform, so the 128-wide
/// model's 66,048 weights need not be stored in the fixture.
Tensor splitmix_uniform(uint64_t seed, const Shape& shape, double bound) {
  Tensor t = Tensor::empty(shape, DType::Float64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t z = seed + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (static_cast<double>(z >> 11) * 0x1.0p-53 * 2 - 1) * bound;
  }
  return t;
}

// MultiHeadAttention(128, 8) with W_q, W_k, W_v, W_o and a mask that blocks
// both keys of sequence 2: PyTorch's softmax over a row of -inf gives NaN;
// qkv gives that query zero weights, so its output is W_o's bias alone.
void mha_128() {
  std::printf("MultiHeadAttention(128, 8) on [3, 2, 128], sequence 2 fully masked: MultiHeadAttention(128, 8)\n");
  MultiHeadAttention mha(128, 8);
  mha.to(DType::Float64);
  // The tutorial's parameters in order: W_q.weight, W_q.bias, W_k.weight, ...
  // qkv's q_proj.weight, q_proj.bias, k_proj.weight, ... are the same list.
  uint64_t i = 0;
  for (auto& [name, p] : mha.named_parameters()) set(p, splitmix_uniform(1000 * ++i, p.shape(), 1 / std::sqrt(128.0)));
  MhaOptions options;
  options.key_padding_mask = equal(get("mha_128:mask"), 1);  // [3, 2]: true for keys that may be attended
  options.need_weights = true;
  AttentionResult r = mha.forward(get("mha_128:x"), options);
  show(r.output);
  Tensor theirs = get("mha_128:out"), their_weights = get("mha_128:weights");
  check("output, sequences 0-1", narrow(r.output, 0, 0, 2), narrow(theirs, 0, 0, 2));
  check("weights, sequences 0-1", narrow(r.weights, 0, 0, 2), narrow(their_weights, 0, 0, 2));
  // Sequence 2: PyTorch's NaN against qkv's documented zeros.
  int64_t nan = 0, as_documented = 0;
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t c = 0; c < 128; ++c) {
      nan += std::isnan(theirs.at({2, t, c}));
      as_documented += r.output.at({2, t, c}) == mha.out_proj->bias.at({c});
    }
  bool ok = nan == 256 && as_documented == 256 && sum(narrow(r.weights, 0, 2, 1)).item() == 0;
  failures += !ok;
  std::printf("  %-28s PyTorch: %lld of 256 values NaN; qkv: zero weights, output = W_o.bias  %s\n",
              "output, sequence 2", static_cast<long long>(nan), ok ? "ok" : "DIFFERS");
}

// The bias-free variant (nn.Linear(..., bias=False) everywhere), given
// separate query, key and value tensors.
void mha_no_bias() {
  std::printf(
      "MultiHeadAttention(16, 4, bias=False) on query [2, 3, 16], key and value [2, 5, 16]: "
      "MultiHeadAttention(16, 4, {.bias = false})\n");
  MultiHeadAttention mha(16, 4, {.bias = false});
  mha.to(DType::Float64);
  set(mha.q_proj->weight, get("mha_no_bias:w.W_q.weight"));
  set(mha.k_proj->weight, get("mha_no_bias:w.W_k.weight"));
  set(mha.v_proj->weight, get("mha_no_bias:w.W_v.weight"));
  set(mha.out_proj->weight, get("mha_no_bias:w.W_o.weight"));
  MhaOptions options;
  options.need_weights = true;
  AttentionResult r = mha.forward(get("mha_no_bias:query"), get("mha_no_bias:key"), get("mha_no_bias:value"), options);
  show(r.output);
  check("output", r.output, get("mha_no_bias:out"));
  check("weights", r.weights, get("mha_no_bias:weights"));
}

// A standalone ScaledDotProductAttention module with a causal mask.
void sdpa_module() {
  std::printf(
      "ScaledDotProductAttention()(q, k, v, causal) on [2, 3, 6], [2, 4, 6], [2, 4, 5]: "
      "scaled_dot_product_attention\n");
  AttentionResult r =
      scaled_dot_product_attention(get("sdpa_module:q"), get("sdpa_module:k"), get("sdpa_module:v"), causal_mask(3, 4));
  show(r.output);
  check("output", r.output, get("sdpa_module:out"));
  check("weights", r.weights, get("sdpa_module:weights"));
}

// Key-value attention with the four scoring functions (one query per
// sequence, keys and values of different widths, valid lengths 2 and 6),
// then hard attention on the bilinear weights.
void scoring_functions() {
  std::printf("key-value attention, query [2, 1, 2], keys [2, 10, 2], values [2, 10, 4], valid lengths 2, 6\n");
  Tensor q = get("scores:q"), keys = get("scores:keys"), values = get("scores:values");
  Tensor valid = reshape(key_padding_mask({2, 6}, 10), {2, 1, 10});
  AdditiveScore additive(2, 2, 8);
  additive.to(DType::Float64);
  set(additive.w_q->weight, get("scores:additive:w.W_q.weight"));
  set(additive.w_k->weight, get("scores:additive:w.W_k.weight"));
  set(additive.w_v->weight, get("scores:additive:w.w_v.weight"));
  BilinearScore bilinear(2, 2);
  bilinear.to(DType::Float64);
  set(bilinear.weight, get("scores:bilinear.w.W"));
  std::pair<std::string, ScoreFn> scores[] = {{"dot", dot_score},
                                              {"scaled_dot", scaled_dot_score},
                                              {"additive", std::ref(additive)},
                                              {"bilinear", std::ref(bilinear)}};
  for (auto& [name, score] : scores) {
    AttentionResult r = attention(q, keys, values, score, valid);
    check(name + " output", r.output, get("scores:" + name + ".out"));
    check(name + " weights", r.weights, get("scores:" + name + ".weights"));
  }
  HardAttentionResult hard = hard_attention(attention(q, keys, values, std::ref(bilinear), valid).weights, values);
  check("hard attention indices", hard.indices, get("scores:hard.indices"));
  check("hard attention output", hard.output, get("scores:hard.out"));
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : QKV_FIXTURE_DIR "/tutorial_models.safetensors";
  try {
    fixture = load_safetensors(path);
    self_attention();
    self_attention_v2();
    mha_128();
    mha_no_bias();
    sdpa_module();
    scoring_functions();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutorial_models: %s\n", e.what());
    return 1;
  }
  if (failures)
    std::printf("%d check(s) differ from PyTorch\n", failures);
  else
    std::printf("every model matches PyTorch\n");
  return failures ? 1 : 0;
}
