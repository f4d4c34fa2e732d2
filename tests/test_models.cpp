// The GPT and Seq2Seq models: parameter names, causality, padding, errors,
// and float64 gradient checks from the loss to every parameter.
#include <catch2/catch.hpp>

#include "nn/nn.h"
#include "test_helpers.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;
using testing::ids;

TEST_CASE("GPT names its parameters as docs/architecture.md lists them", "[models][gpt]") {
  GPTConfig config;
  config.vocab = 11, config.context = 7, config.width = 8, config.heads = 2, config.layers = 2;
  GPT gpt(config);
  std::vector<std::pair<std::string, Shape>> want = {{"tok_emb.weight", {11, 8}}, {"pos_emb.weight", {7, 8}}};
  for (std::string b : {"blocks.0.", "blocks.1."}) {
    want.push_back({b + "ln1.weight", {8}});
    want.push_back({b + "ln1.bias", {8}});
    for (std::string p : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      want.push_back({b + "attn." + p + ".weight", {8, 8}});
      want.push_back({b + "attn." + p + ".bias", {8}});
    }
    want.push_back({b + "ln2.weight", {8}});
    want.push_back({b + "ln2.bias", {8}});
    want.push_back({b + "mlp.fc1.weight", {32, 8}});
    want.push_back({b + "mlp.fc1.bias", {32}});
    want.push_back({b + "mlp.fc2.weight", {8, 32}});
    want.push_back({b + "mlp.fc2.bias", {8}});
  }
  want.push_back({"ln_f.weight", {8}});
  want.push_back({"ln_f.bias", {8}});
  auto named = gpt.named_parameters();
  REQUIRE(named.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(named[i].first == want[i].first);
    CHECK(named[i].second.shape() == want[i].second);
  }
  Tensor logits = gpt.forward(ids({1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(logits.shape() == Shape{2, 3, 11});
}

TEST_CASE("GPT logits at position i do not depend on later tokens", "[models][gpt]") {
  for (bool post_ln : {false, true}) {
    GPTConfig config;
    config.vocab = 9, config.context = 6, config.width = 8, config.heads = 2, config.layers = 2,
    config.post_ln = post_ln;
    GPT gpt(config);
    Tensor a = gpt.forward(ids({1, 2, 3, 4, 5, 6}, {1, 6})), b = gpt.forward(ids({1, 2, 3, 8, 0, 7}, {1, 6}));
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t v = 0; v < 9; ++v) CHECK(a.at({0, t, v}) == b.at({0, t, v}));
    CHECK(a.at({0, 3, 0}) != b.at({0, 3, 0}));
  }
}

TEST_CASE("GPT collects per-layer attention weights on request", "[models][gpt]") {
  GPTConfig config;
  config.vocab = 5, config.context = 4, config.width = 8, config.heads = 4, config.layers = 3;
  GPT gpt(config);
  std::vector<Tensor> weights;
  gpt.forward(ids({1, 2, 3}, {1, 3}), &weights);
  REQUIRE(weights.size() == 3);
  CHECK(weights[0].shape() == Shape{1, 4, 3, 3});
  CHECK(weights[2].at({0, 1, 0, 2}) == 0);  // causal: the first query sees only itself
}

TEST_CASE("a 2-layer GPT passes a float64 gradient check from the loss to every parameter",
          "[models][gpt][gradcheck]") {
  for (bool post_ln : {false, true}) {
    GPTConfig config;
    config.vocab = 7, config.context = 5, config.width = 8, config.heads = 2, config.layers = 2, config.dropout = 0.1;
    config.post_ln = post_ln;
    GPT gpt(config);
    gpt.to(DType::Float64);
    Tensor input = ids({1, 4, 2, 6, 0, 3, 3, 5}, {2, 4});
    Tensor targets = ids({4, 2, 6, -100, 3, 3, 5, 1}, {2, 4});
    GradcheckResult r =
        gradcheck_leaves([&] { return cross_entropy(gpt.forward(input), targets); }, gpt.named_parameters());
    INFO((post_ln ? "post-LN\n" : "pre-LN\n") << r.summary());
    CHECK(r.ok);
    CHECK(r.inputs.size() == gpt.named_parameters().size());
  }
}

TEST_CASE("Seq2Seq encodes with padding masks and decodes causally with cross-attention", "[models][seq2seq]") {
  Seq2SeqConfig config;
  config.vocab = 9, config.context = 6, config.width = 8, config.heads = 2;
  Seq2Seq model(config);
  std::vector<std::string> names;
  for (auto& [name, t] : model.named_parameters()) names.push_back(name);
  for (std::string n : {"tok_emb.weight", "pos_emb.weight", "encoder.0.attn.q_proj.weight", "encoder_ln.weight",
                        "decoder.0.attn.k_proj.bias", "decoder.0.ln_cross.weight",
                        "decoder.0.cross_attn.out_proj.weight", "decoder.0.mlp.fc2.bias", "ln_f.bias"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());

  Tensor src = ids({1, 2, 3, 4, 5, 6, 0, 0}, {2, 4});
  Tensor tgt = ids({7, 1, 2, 7, 3, 4}, {2, 3});
  Tensor logits = model.forward(src, {4, 2}, tgt);
  CHECK(logits.shape() == Shape{2, 3, 9});
  // Padding positions of the source do not matter.
  Tensor other = ids({1, 2, 3, 4, 5, 6, 8, 3}, {2, 4});
  Tensor again = model.forward(other, {4, 2}, tgt);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t v = 0; v < 9; ++v) CHECK(again.at({1, t, v}) == Approx(logits.at({1, t, v})).epsilon(1e-6));
  // The decoder is causal.
  Tensor later = model.forward(src, {4, 2}, ids({7, 1, 8, 7, 3, 0}, {2, 3}));
  for (int64_t v = 0; v < 9; ++v) CHECK(later.at({0, 1, v}) == logits.at({0, 1, v}));
}

TEST_CASE("a 1+1-layer Seq2Seq passes a float64 gradient check end to end", "[models][seq2seq][gradcheck]") {
  Seq2SeqConfig config;
  config.vocab = 6, config.context = 4, config.width = 8, config.heads = 2, config.dropout = 0.1;
  Seq2Seq model(config);
  model.to(DType::Float64);
  Tensor src = ids({1, 2, 3, 2, 4, 0}, {2, 3});
  Tensor tgt = ids({5, 1, 2, 5, 4, 3}, {2, 3});
  Tensor targets = ids({1, 2, 0, 4, 3, -100}, {2, 3});
  GradcheckResult r = gradcheck_leaves(
      [&] {
        return cross_entropy(model.forward(src, {3, 2}, tgt), targets);
      },
      model.named_parameters());
  INFO(r.summary());
  CHECK(r.ok);
}

TEST_CASE("model errors name the model and the sizes", "[models][errors]") {
  GPTConfig bad;
  bad.width = 10, bad.heads = 4;
  CHECK_THROWS_WITH(GPT(bad), Contains("GPT: width 10 is not divisible by heads 4"));
  bad.width = 8, bad.vocab = 0;
  CHECK_THROWS_WITH(GPT(bad), Contains("GPT: vocab 0"));
  GPTConfig small;
  small.vocab = 5, small.context = 3, small.width = 8, small.heads = 2;
  GPT gpt(small);
  CHECK_THROWS_WITH(gpt.forward(ids({1, 2, 3, 4}, {1, 4})),
                    Contains("GPT: sequence of 4 tokens exceeds the context of 3"));
  CHECK_THROWS_WITH(gpt.forward(ids({1, 2}, {2})), Contains("GPT: ids must be int64 [B, T]"));
  CHECK_THROWS_WITH(gpt.forward(ids({1, 9}, {1, 2})), Contains("id 9 out of range [0, 5)"));
  Seq2SeqConfig s2s;
  s2s.vocab = 5, s2s.context = 4, s2s.width = 8, s2s.heads = 2;
  Seq2Seq model(s2s);
  CHECK_THROWS_WITH(model.forward(ids({1, 2}, {1, 2}), {1, 2}, ids({1}, {1, 1})),
                    Contains("Seq2Seq: 2 source lengths for a batch of 1"));
  CHECK_THROWS_WITH(model.forward(ids({1, 2}, {1, 2}), {3}, ids({1}, {1, 1})),
                    Contains("key_padding_mask: length 3 outside [0, 2]"));
}

TEST_CASE(
    "model kinds: the parameter-count formula equals the built model's count, and fields round-trip with bounds") {
  REQUIRE(model_kind_names() == std::vector<std::string>{"gpt", "seq2seq", "encoder", "vit", "recommender"});
  for (const std::string& name : model_kind_names()) {
    const ModelKind& kind = model_kind(name);
    for (ModelShape s : {ModelShape{13, 9, 8, 2, 1}, ModelShape{256, 64, 32, 4, 3, 0.1, true, "window:4"}}) {
      // The classifiers' and the ViT's own fields (the other kinds ignore them).
      s.classes = 3, s.image = 8, s.patch = s.layers == 1 ? 2 : 4, s.pooling = s.layers == 1 ? "cls" : "mean";
      if (name == "vit") s.pooling = "cls";
      INFO(name << " width " << s.width << " layers " << s.layers);
      kind.check(s, "test");
      Generator gen(1);
      CHECK(kind.build(s, &gen)->num_parameters() == kind.parameter_count(s));
      ModelShape back = ModelShape::from_fields(s.fields(), "test");
      CHECK(back.fields() == s.fields());
    }
  }
  CHECK_THROWS_WITH(model_kind("rnn"),
                    Catch::Matchers::Contains("unknown model 'rnn' (gpt, seq2seq, encoder, vit, recommender)"));
  auto fields = ModelShape{13, 9, 8, 2, 1}.fields();
  fields["layers"] = "129";
  CHECK_THROWS_WITH(ModelShape::from_fields(fields, "f.safetensors"),
                    Catch::Matchers::Contains("layers = '129', expected an integer in [1, 128]"));
  // The counts of the largest shapes the bounds allow stay finite (a hostile file is compared against them).
  CHECK(model_kind("seq2seq").parameter_count({kMaxVocab, kMaxContext, kMaxWidth, kMaxWidth, kMaxLayers}) >
        (int64_t{1} << 40));
}
