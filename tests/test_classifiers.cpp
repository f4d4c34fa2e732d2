// The encoder classifier, the Vision Transformer and the recommender:
// parameter names, what each position may see, padding, errors, and float64
// gradient checks from the loss to every parameter. (PyTorch's numbers for
// the same models are in test_fixtures.cpp, family "classifiers".)
#include <catch2/catch.hpp>

#include "nn/nn.h"
#include "test_helpers.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;

namespace {
using testing::ids;

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.named_parameters()) names.push_back(name);
  return names;
}

EncoderConfig small_encoder(Pooling pooling) {
  EncoderConfig c;
  c.vocab = 7, c.context = 6, c.width = 8, c.heads = 2, c.layers = 2, c.classes = 3, c.pooling = pooling;
  return c;
}

ViTConfig small_vit() {
  ViTConfig c;
  c.image = 4, c.patch = 2, c.width = 8, c.heads = 2, c.layers = 2, c.classes = 3;
  return c;
}
}  // namespace

TEST_CASE("PatchEmbedding is a Linear over each flattened patch", "[layers][vit]") {
  PatchEmbedding embed(1, 2, 3);
  CHECK(names_of(embed) == std::vector<std::string>{"proj.weight", "proj.bias"});
  CHECK(embed.proj->weight.shape() == Shape{3, 4});
  Tensor images = Tensor::randn({2, 1, 4, 6});
  Tensor out = embed(images);
  REQUIRE(out.shape() == Shape{2, 6, 3});
  // Token 4 is patch (1, 1): rows 2-3, columns 2-3.
  for (int64_t o = 0; o < 3; ++o) {
    double want = embed.proj->bias.at({o});
    for (int64_t u = 0; u < 2; ++u)
      for (int64_t v = 0; v < 2; ++v) want += embed.proj->weight.at({o, 2 * u + v}) * images.at({1, 0, 2 + u, 2 + v});
    CHECK(out.at({1, 4, o}) == Approx(want).margin(1e-6));  // float32 sums of four products
  }
  CHECK_THROWS_WITH(embed(Tensor::randn({2, 3, 4, 4})),
                    Contains("PatchEmbedding(1 channels, patch 2): images must be [B, 1, H, W], got [2, 3, 4, 4]"));
}

TEST_CASE("EncoderClassifier names its parameters and ignores padding", "[models][encoder]") {
  EncoderClassifier model(small_encoder(Pooling::Cls));
  std::vector<std::string> names = names_of(model);
  CHECK(names.front() == "cls_token");  // a module's own parameters come before its sub-modules', as in torch
  for (std::string n : {"tok_emb.weight", "pos_emb.weight", "blocks.1.attn.q_proj.weight", "blocks.0.mlp.fc2.bias",
                        "ln_f.weight", "head.weight", "head.bias"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  CHECK(model.head->weight.shape() == Shape{3, 8});
  for (Pooling pooling : {Pooling::Cls, Pooling::Mean}) {
    EncoderClassifier m(small_encoder(pooling));
    Tensor x = ids({1, 2, 3, 4, 5, 6, 0, 0}, {2, 4}), other = ids({1, 2, 3, 4, 5, 6, 2, 5}, {2, 4});
    Tensor l1 = m.forward(x, {4, 2}), l2 = m.forward(other, {4, 2});
    REQUIRE(l1.shape() == Shape{2, 3});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 3; ++k) CHECK(l2.at({b, k}) == Approx(l1.at({b, k})).epsilon(1e-6));
    // Every token matters: no causal mask.
    Tensor first = m.forward(ids({3, 2, 3, 4}, {1, 4}), {4}), changed = m.forward(ids({1, 2, 3, 4}, {1, 4}), {4});
    CHECK(first.at({0, 0}) != changed.at({0, 0}));
    std::vector<Tensor> weights;
    m.forward(x, {4, 2}, &weights);
    REQUIRE(weights.size() == 2);
    int64_t n = pooling == Pooling::Cls ? 5 : 4;
    CHECK(weights[0].shape() == Shape{2, 2, n, n});
    CHECK(weights[0].at({1, 0, 0, n - 1}) == 0);  // row 1's padding is never attended to
  }
  std::vector<std::string> mean_names = names_of(EncoderClassifier(small_encoder(Pooling::Mean)));
  CHECK(std::find(mean_names.begin(), mean_names.end(), "cls_token") == mean_names.end());
}

TEST_CASE("ViT attends over its patches and the [CLS] token", "[models][vit]") {
  ViT vit(small_vit());
  std::vector<std::string> names = names_of(vit);
  std::vector<std::string> first{"cls_token", "patch_embed.proj.weight", "patch_embed.proj.bias", "pos_emb.weight"};
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 4) == first);
  CHECK(vit.pos_emb->weight.shape() == Shape{5, 8});
  std::vector<Tensor> weights;
  Tensor logits = vit.forward(Tensor::randn({3, 1, 4, 4}), &weights);
  CHECK(logits.shape() == Shape{3, 3});
  REQUIRE(weights.size() == 2);
  CHECK(weights[1].shape() == Shape{3, 2, 5, 5});
}

TEST_CASE("Recommender scores every item from the history so far", "[models][recommender]") {
  RecommenderConfig c;
  c.items = 9, c.context = 5, c.width = 8, c.heads = 2, c.layers = 2;
  Recommender rec(c);
  std::vector<std::string> names = names_of(rec);
  CHECK(names[0] == "item_emb.weight");
  CHECK(rec.item_emb->weight.shape() == Shape{10, 8});
  Tensor a = rec.forward(ids({3, 1, 4, 1, 5}, {1, 5})), b = rec.forward(ids({3, 1, 4, 9, 0}, {1, 5}));
  REQUIRE(a.shape() == Shape{1, 5, 10});
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t v = 0; v < 10; ++v) CHECK(a.at({0, t, v}) == b.at({0, t, v}));  // causal
  CHECK(a.at({0, 3, 2}) != b.at({0, 3, 2}));
}

TEST_CASE("the classifiers and the recommender pass float64 gradient checks end to end",
          "[models][gradcheck][encoder][vit][recommender]") {
  for (Pooling pooling : {Pooling::Cls, Pooling::Mean}) {
    EncoderConfig c = small_encoder(pooling);
    c.dropout = 0.1;
    EncoderClassifier m(c);
    m.to(DType::Float64);
    Tensor x = ids({1, 2, 3, 4, 5, 6, 0, 0}, {2, 4}), y = ids({2, 0}, {2});
    GradcheckResult r = gradcheck_leaves([&] { return cross_entropy(m.forward(x, {4, 2}), y); }, m.named_parameters());
    INFO("encoder, " << pooling_name(pooling) << " pooling\n" << r.summary());
    CHECK(r.ok);
    CHECK(r.inputs.size() == m.named_parameters().size());
  }
  {
    ViTConfig c = small_vit();
    c.dropout = 0.1, c.post_ln = true;
    ViT vit(c);
    vit.to(DType::Float64);
    Generator gen(3);
    Tensor images = Tensor::randn({2, 1, 4, 4}, DType::Float64, &gen), y = ids({1, 2}, {2});
    GradcheckResult r = gradcheck_leaves([&] { return cross_entropy(vit.forward(images), y); }, vit.named_parameters());
    INFO("vit\n" << r.summary());
    CHECK(r.ok);
  }
  {
    RecommenderConfig c;
    c.items = 6, c.context = 4, c.width = 8, c.heads = 2, c.layers = 2, c.dropout = 0.1;
    Recommender rec(c);
    rec.to(DType::Float64);
    Tensor x = ids({1, 4, 2, 6, 3, 5, 0, 0}, {2, 4}), y = ids({4, 2, 6, 1, 5, -100, -100, -100}, {2, 4});
    GradcheckResult r = gradcheck_leaves([&] { return cross_entropy(rec.forward(x), y); }, rec.named_parameters());
    INFO("recommender\n" << r.summary());
    CHECK(r.ok);
  }
}

TEST_CASE("classifier and recommender errors name the model and the shapes", "[models][errors]") {
  EncoderClassifier enc(small_encoder(Pooling::Cls));
  CHECK_THROWS_WITH(enc.forward(ids({1, 2, 3, 4, 5, 6}, {1, 6}), {6}),
                    Contains("EncoderClassifier: 6 tokens and the [CLS] token exceed the context of 6"));
  CHECK_THROWS_WITH(enc.forward(ids({1, 2}, {1, 2}), {3}), Contains("EncoderClassifier: length 3 is not in [1, 2]"));
  CHECK_THROWS_WITH(enc.forward(ids({1, 2}, {1, 2}), {2, 2}),
                    Contains("EncoderClassifier: 2 lengths for a batch of 1"));
  CHECK_THROWS_WITH(enc.forward(ids({1, 2}, {2}), {2}), Contains("EncoderClassifier: ids must be int64 [B, T]"));
  EncoderConfig one_class = small_encoder(Pooling::Cls);
  one_class.classes = 1;
  CHECK_THROWS_WITH(EncoderClassifier(one_class), Contains("classes 1 must be >= 0 and >= 2"));
  ViT vit(small_vit());
  CHECK_THROWS_WITH(vit.forward(Tensor::randn({2, 1, 4, 6})),
                    Contains("ViT: images must be [B, 1, 4, 4], got [2, 1, 4, 6]"));
  ViTConfig bad = small_vit();
  bad.patch = 3;
  CHECK_THROWS_WITH(ViT(bad), Contains("ViT: patch 3 does not tile images of 4 x 4"));
  RecommenderConfig c;
  c.items = 4, c.context = 3, c.width = 8, c.heads = 2;
  Recommender rec(c);
  CHECK_THROWS_WITH(rec.forward(ids({1, 2, 3, 4}, {1, 4})),
                    Contains("Recommender: sequence of 4 tokens exceeds the context of 3"));
  CHECK_THROWS_WITH(rec.forward(ids({1, 5}, {1, 2})), Contains("id 5 out of range [0, 5)"));
  CHECK_THROWS_WITH(parse_pooling("max"), Contains("unknown pooling 'max' (cls, mean)"));
}
