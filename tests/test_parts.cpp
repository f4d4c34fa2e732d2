// The named parts blocks are built from (nn/parts.h): the registries, the
// built-in RMSNorm and SwiGLU (their ops' errors and bits), a part of one's
// own, and checkpoints' record of the parts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "autograd/parallel.h"
#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;

namespace {

// A norm of the test's own: x · scale, one parameter per channel.
class ScaleNorm : public Norm {
 public:
  explicit ScaleNorm(int64_t width) { scale = register_parameter("scale", Tensor::full({width}, 0.5)); }
  Tensor forward(const Tensor& x) const override { return mul(x, scale); }
  Tensor scale;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * element_size(a.dtype())) == 0;
}

}  // namespace

TEST_CASE("parts: every kind with every built-in part counts, builds and round-trips its fields", "[parts]") {
  std::vector<BlockParts> all;
  for (const std::string& norm : {"layernorm", "rmsnorm"})
    for (const std::string& mlp : {"gelu", "swiglu"})
      for (const std::string& position : {"learned", "rope"})
        for (int64_t kv_heads : {0, 1, 2}) all.push_back({norm, mlp, position, kv_heads});
  for (const BlockParts& parts : all)
    for (const std::string& name : model_kind_names()) {
      const ModelKind& kind = model_kind(name);
      ModelShape s{13, 9, 8, 2, 2};
      s.classes = 3, s.image = 8, s.patch = 4, s.parts = parts;
      INFO(name << " " << parts.str());
      kind.check(s, "test");
      Generator gen(1);
      std::unique_ptr<Module> model = kind.build(s, &gen);
      CHECK(model->num_parameters() == kind.parameter_count(s));
      ModelShape back = ModelShape::from_fields(s.fields(), "test");
      CHECK(back.parts == s.parts);
      // Today's parts write no field: their checkpoints keep their bytes.
      CHECK(s.fields().count("norm") == (parts.norm != "layernorm"));
      CHECK(s.fields().count("mlp") == (parts.mlp != "gelu"));
      CHECK(s.fields().count("position") == (parts.position != "learned"));
      CHECK(s.fields().count("kv-heads") == (parts.kv_heads != 0));
    }
}

TEST_CASE("parts: a GPT of rope and grouped-query attention generates with its cache as without", "[parts]") {
  for (int64_t kv_heads : {1, 2, 4}) {
    GPTConfig c;
    c.vocab = 11, c.context = 12, c.width = 16, c.heads = 4, c.layers = 2;
    c.parts.position = "rope", c.parts.kv_heads = kv_heads;
    Generator gen(5);
    GPT gpt(c, &gen);
    gpt.to(DType::Float64);
    gpt.eval();
    NoGradGuard no_grad;
    Tensor ids = Tensor::from_vector<int64_t>({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, {2, 6});
    Tensor whole = gpt.forward(ids);
    KVCache cache = gpt.make_cache(2);
    CHECK(cache.keys[0].size(2) == kv_heads);  // the cache keeps the key/value heads only
    std::vector<Tensor> steps{gpt.forward_cached(narrow(ids, 1, 0, 4), cache)};
    for (int64_t t = 4; t < 6; ++t) steps.push_back(gpt.forward_cached(narrow(ids, 1, t, 1), cache));
    Tensor cached = concat(steps, 1);
    double worst = 0;
    std::vector<double> a = whole.to_vector(), b = cached.to_vector();
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    INFO("kv_heads " << kv_heads);
    CHECK(worst < 1e-12);
  }
}

TEST_CASE("parts: kv-heads must divide the heads, and rope needs heads of even width", "[parts]") {
  ModelShape s{13, 9, 8, 4, 1};
  auto fields = s.fields();
  fields["kv-heads"] = "3";
  CHECK_THROWS_WITH(ModelShape::from_fields(fields, "f.safetensors"),
                    Contains("f.safetensors: kv-heads 3 does not divide the 4 heads"));
  fields["kv-heads"] = "0";
  CHECK_THROWS_WITH(ModelShape::from_fields(fields, "f.safetensors"),
                    Contains("f.safetensors: kv-heads must be an integer in [1, 65536], got '0'"));
  fields.erase("kv-heads");
  fields["heads"] = "8";  // heads of width 1
  fields["position"] = "rope";
  CHECK_THROWS_WITH(ModelShape::from_fields(fields, "f.safetensors"),
                    Contains("f.safetensors: rope rotates pairs of a head's 1 values"));
  CHECK_THROWS_WITH(MultiHeadAttention(8, 4, MhaConfig{.kv_heads = 3}), Contains("kv_heads 3 does not divide"));
  CHECK_THROWS_WITH(rope(Tensor::zeros({1, 2, 3, 5})),
                    Contains("rope: x must be [B, n, heads, head_dim] with an even"));
  CHECK_THROWS_WITH(rope(Tensor::zeros({2, 6})), Contains("rope: x must be"));
}

TEST_CASE("parts: rope keeps a query's score with a key a function of their distance alone", "[parts]") {
  Generator gen(2);
  Tensor q = Tensor::randn({1, 1, 1, 8}, DType::Float64, &gen), k = Tensor::randn({1, 1, 1, 8}, DType::Float64, &gen);
  auto score = [&](int64_t m, int64_t n) { return sum(mul(rope(q, m), rope(k, n))).item(); };
  CHECK(std::fabs(score(5, 2) - score(13, 10)) < 1e-12);
  CHECK(std::fabs(score(0, 0) - sum(mul(q, k)).item()) < 1e-12);  // position 0 is no rotation
  CHECK(std::fabs(score(5, 2) - score(5, 3)) > 1e-6);
}

TEST_CASE("parts: the parameter names are today's for the defaults and the parts' own otherwise", "[parts]") {
  GPTConfig c;
  c.vocab = 5, c.context = 4, c.width = 8, c.heads = 2, c.layers = 1;
  std::vector<std::string> names;
  for (const auto& [name, p] : GPT(c).named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"tok_emb.weight",
                                          "pos_emb.weight",
                                          "blocks.0.ln1.weight",
                                          "blocks.0.ln1.bias",
                                          "blocks.0.attn.q_proj.weight",
                                          "blocks.0.attn.q_proj.bias",
                                          "blocks.0.attn.k_proj.weight",
                                          "blocks.0.attn.k_proj.bias",
                                          "blocks.0.attn.v_proj.weight",
                                          "blocks.0.attn.v_proj.bias",
                                          "blocks.0.attn.out_proj.weight",
                                          "blocks.0.attn.out_proj.bias",
                                          "blocks.0.ln2.weight",
                                          "blocks.0.ln2.bias",
                                          "blocks.0.mlp.fc1.weight",
                                          "blocks.0.mlp.fc1.bias",
                                          "blocks.0.mlp.fc2.weight",
                                          "blocks.0.mlp.fc2.bias",
                                          "ln_f.weight",
                                          "ln_f.bias"});
  c.parts = {"rmsnorm", "swiglu"};
  GPT gpt(c);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : gpt.named_parameters()) shapes[name] = p.shape();
  CHECK(shapes.at("blocks.0.ln1.weight") == Shape{8});
  CHECK_FALSE(shapes.count("blocks.0.ln1.bias"));
  CHECK(shapes.at("blocks.0.mlp.gate.weight") == Shape{24, 8});
  CHECK(shapes.at("blocks.0.mlp.up.weight") == Shape{24, 8});
  CHECK(shapes.at("blocks.0.mlp.down.weight") == Shape{8, 24});
  CHECK(shapes.at("ln_f.weight") == Shape{8});
  CHECK(swiglu_hidden(64) == 176);
}

TEST_CASE("parts: a file's part fields are checked, and a file without them means today's parts", "[parts]") {
  auto fields = ModelShape{13, 9, 8, 2, 1}.fields();
  REQUIRE_FALSE(fields.count("norm"));
  CHECK(ModelShape::from_fields(fields, "old.safetensors").parts == BlockParts{});
  fields["norm"] = "groupnorm";
  CHECK_THROWS_WITH(ModelShape::from_fields(fields, "f.safetensors"),
                    Contains("f.safetensors: unknown norm 'groupnorm' (layernorm, rmsnorm"));
  fields["norm"] = "rmsnorm";
  fields["mlp"] = "relu\n";
  CHECK_THROWS_WITH(ModelShape::from_fields(fields, "f.safetensors"),
                    Contains("f.safetensors: unknown mlp 'relu\\n' (gelu, swiglu"));
}

TEST_CASE("parts: a part of one's own registers, builds into every block and is refused twice", "[parts]") {
  static bool registered = false;  // Catch may run the case again in one process
  if (!registered)
    register_norm_part({"test_scale_norm", "x · scale",
                        [](int64_t width) -> std::shared_ptr<Norm> { return std::make_shared<ScaleNorm>(width); },
                        [](double width) { return width; }});
  registered = true;
  CHECK_THROWS_WITH(
      register_norm_part({"test_scale_norm", "again", norm_part("rmsnorm").build, [](double) { return 0.0; }}),
      Contains("the norm 'test_scale_norm' exists"));
  CHECK_THROWS_WITH(register_mlp_part({"My MLP", "", mlp_part("gelu").build, [](double) { return 0.0; }}),
                    Contains("name must be 1-32 of a-z, 0-9 and _"));
  ModelShape s{13, 9, 8, 2, 2};
  s.parts.norm = "test_scale_norm";
  Generator gen(1);
  auto model = model_kind("gpt").build(s, &gen);
  CHECK(model->num_parameters() == model_kind("gpt").parameter_count(s));
  bool found = false;
  for (const auto& [name, p] : model->named_parameters()) found = found || name == "blocks.1.ln2.scale";
  CHECK(found);
  CHECK(ModelShape::from_fields(s.fields(), "mine.safetensors").parts.norm == "test_scale_norm");
  CHECK_THROWS_WITH(norm_part("nope"), Contains("rmsnorm, test_scale_norm)"));
}

TEST_CASE("parts: rms_norm, swiglu and their modules refuse shapes that do not fit", "[parts]") {
  Tensor x = Tensor::randn({2, 4});
  CHECK_THROWS_WITH(rms_norm(x, Tensor::ones({5})),
                    Contains("rms_norm: weight [5] float32 does not match input [2, 4]"));
  CHECK_THROWS_WITH(rms_norm(Tensor::zeros({2, 0}), Tensor()),
                    Contains("rms_norm: input must end in a dim of size > 0"));
  CHECK_THROWS_WITH(RMSNorm(5).forward(x), Contains("RMSNorm(5): input [2, 4] does not end in 5"));
  CHECK_THROWS_WITH(swiglu(x, Tensor::randn({4, 2})), Contains("swiglu: gate [2, 4] float32 and up [4, 2] float32"));
  CHECK_THROWS_WITH(swiglu(x, x.to(DType::Float64)), Contains("must have one shape and dtype"));
  CHECK_THROWS_WITH(SwiGLU(5).forward(x), Contains("[2, 4]"));
}

TEST_CASE("parts: rms_norm and swiglu give the same bits at 1 and 2 threads, forward and backward", "[parts]") {
  auto run = [](int threads) {
    set_num_threads(threads);
    Generator gen(3);
    Tensor x = Tensor::randn({300, 40}, DType::Float32, &gen).requires_grad_();
    Tensor w = Tensor::randn({40}, DType::Float32, &gen).requires_grad_();
    Tensor b = Tensor::randn({300, 40}, DType::Float32, &gen).requires_grad_();
    Tensor y = swiglu(rms_norm(x, w), b);
    sum(mul(y, y)).backward();
    set_num_threads(1);
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) CHECK(same_bits(one[i], two[i]));
}
