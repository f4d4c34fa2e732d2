// The library's study and page (study/study.h, study/page.h) and the one
// interface they read attention through (nn::AttentionRecording): what a
// program with its own model gets without the qkv program.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "nn/nn.h"
#include "study/page.h"

using namespace qkv;
using namespace qkv::nn;
using Catch::Matchers::Contains;

namespace {

// The JSON a page holds (the script element qkv-data), parsed.
nlohmann::json page_json(const std::string& html) {
  const std::string open = "<script id=\"qkv-data\" type=\"application/json\">";
  const size_t at = html.find(open), end = html.find("</script>", at);
  REQUIRE(at != std::string::npos);
  return nlohmann::json::parse(html.substr(at + open.size(), end - at - open.size()));
}

// A tiny float64 GPT and one window of tokens with their successors.
struct TinyGpt {
  GPT gpt{[] {
    GPTConfig c{.vocab = 11, .context = 8, .width = 8, .heads = 2, .layers = 2};
    c.dropout = 0;
    return c;
  }()};
  Tensor x = Tensor::from_vector(std::vector<int64_t>{1, 4, 2, 7, 3, 9}, {1, 6});
  Tensor y = Tensor::from_vector(std::vector<int64_t>{4, 2, 7, 3, 9, 5}, {1, 6});
  TinyGpt() {
    gpt.to(DType::Float64);
    gpt.eval();
  }
  Tensor loss() const { return gpt.loss(x, y); }
};

}  // namespace

TEST_CASE("an AttentionRecording sees each call's weights, the bits need_weights returns, fused kernel or not",
          "[study][attention]") {
  Generator gen(3);
  MultiHeadAttention mha(8, 2, 0.0, true, &gen);
  Tensor x = Tensor::randn({1, 5, 8}, DType::Float32, &gen);
  MhaOptions asked;
  asked.causal = true;
  asked.need_weights = true;
  const AttentionResult composed = mha.forward(x, asked);
  MhaOptions fused;  // fused by default: without a recording it forms no weights
  fused.causal = true;
  CHECK_FALSE(mha.forward(x, fused).weights.defined());
  CHECK_FALSE(attention_weights_wanted());
  Tensor out;
  std::vector<Tensor> seen = record_attention([&] {
    CHECK(attention_weights_wanted());
    out = mha.forward(x, fused).output;
  });
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].shape() == Shape{1, 2, 5, 5});
  CHECK(seen[0].to_vector() == composed.weights.to_vector());
  CHECK(out.to_vector() == composed.output.to_vector());  // the recording took the composed path
  report_attention_weights(seen[0]);                      // no recording alive: nothing happens
  {  // an edit, too, reaches the weights of a model that would take the fused kernel
    int64_t edits = 0;
    AttentionWeightsEdit edit([&](int64_t, const Tensor& w) { return ++edits, w; });
    CHECK(attention_weights_wanted());
    mha.forward(x, fused);
    CHECK(edits == 1);
  }
  AttentionRecording outer([](const Tensor&) {});
  CHECK_THROWS_WITH(AttentionRecording([](const Tensor&) {}), Contains("do not nest"));
}

TEST_CASE("study::record keeps a GPT's maps, their q and k and the embedding, and the page's dL/dP is the loss's",
          "[study][gradcheck]") {
  TinyGpt m;
  study::Study s = study::record([&] { return m.loss(); }, {"a", "b", "c", "d", "e", "f"});
  REQUIRE(s.maps.size() == 2);
  REQUIRE(s.inputs.size() == 2);
  for (const study::AttentionMap& map : s.maps) {
    CHECK(map.weights.shape() == Shape{1, 2, 6, 6});
    CHECK(map.causal);  // every weight past the diagonal is exactly 0
    CHECK(map.rows == std::vector<std::string>{"a", "b", "c", "d", "e", "f"});
  }
  CHECK(s.maps[1].name == "attention 1");
  CHECK(s.inputs[0].q.shape() == Shape{1, 2, 6, 4});
  CHECK(s.inputs[0].scale == Approx(0.5));
  REQUIRE(s.embedding.defined());
  CHECK(s.embedded.size() == 6);

  const std::string html = study::page_html(s, m.gpt, {.title = "tiny </script> gpt"});
  const nlohmann::json data = page_json(html);
  CHECK(data["title"] == "tiny </script> gpt");
  CHECK(data["attention"]["groups"][0]["layers"].size() == 2);
  CHECK(data["graph"]["nodes"].size() > 20);
  CHECK(data["attribution"]["values"].size() == 6);
  CHECK(data["attention"]["neurons"]["heads"].size() > 0);
  // The backward page_html ran: dL/dP of layer 1 against central differences through AttentionWeightsEdit.
  const Tensor p = s.maps[1].weights;
  REQUIRE(p.grad().defined());
  const std::vector<double> grad = p.grad().to_vector();
  double largest = 0;
  for (int64_t i = 0; i < p.numel(); i += 5) {
    auto at = [&](double by) {
      NoGradGuard no_grad;
      AttentionWeightsEdit edit([&](int64_t call, const Tensor& w) {
        if (call != 1) return w;
        std::vector<double> e(w.numel(), 0.0);
        e[i] = by;
        return add(w, Tensor::from_vector(e, w.shape()));
      });
      return m.loss().item();
    };
    CHECK(grad[i] == Approx((at(1e-6) - at(-1e-6)) / 2e-6).margin(1e-8));
    largest = std::max(largest, std::fabs(grad[i]));
  }
  CHECK(largest > 1e-4);  // not 0 = 0
}

TEST_CASE("a part that forms its weights its own way reports them, and the page draws it without q and k", "[study]") {
  Generator gen(5);
  Linear proj(6, 6, true, Init::Torch, &gen);
  Tensor x = Tensor::randn({1, 4, 6}, DType::Float32, &gen);
  struct Scorer : Module {  // the named parameters the page's graph reads
    explicit Scorer(Linear& p) { register_parameter("weight", p.weight); }
  } model(proj);
  study::Study s = study::record([&] {
    Tensor h = proj.forward(x);
    // A score of its own, not scaled_dot_product_attention's; P [1, 1 head, 4, 4] is reported, then weighs h.
    Tensor w = unsqueeze(softmax(neg(matmul(h, h, false, true)), -1), 1);
    report_attention_weights(w);
    return sum(matmul(squeeze(w, 1), h));
  });
  REQUIRE(s.maps.size() == 1);
  CHECK_FALSE(s.inputs[0].q.defined());
  CHECK_FALSE(s.maps[0].causal);
  CHECK(s.maps[0].cols == std::vector<std::string>{"0", "1", "2", "3"});
  const nlohmann::json data = page_json(study::page_html(s, model));
  CHECK(data["attention"]["groups"][0]["layers"][0]["maps"].size() == 1);
  CHECK(data["attention"]["neurons"]["heads"].empty());
  CHECK(data["subtitle"].get<std::string>().rfind("loss = ", 0) == 0);
  CHECK(s.maps[0].weights.grad().defined());  // the page's backward reached the reported P
}

TEST_CASE("write_page writes the curves of a log, refuses one it cannot read, or says why it drew none", "[study]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "qkv_test_study";
  std::filesystem::create_directories(dir);
  const std::string log = (dir / "run.csv").string(), page = (dir / "page.html").string();
  std::ofstream(log) << "step,loss\n1,2.5\n2,2.25\n3,2\n";
  {
    TinyGpt m;
    study::Study s = study::record([&] { return m.loss(); });
    const study::PageSummary drawn = study::write_page(page, s, m.gpt, {.logs = {log}});
    CHECK(drawn.logs == 1);
    std::ifstream in(page);
    const nlohmann::json data = page_json({std::istreambuf_iterator<char>(in), {}});
    CHECK(data["curves"]["runs"][0]["columns"]["loss"]["values"] == nlohmann::json({2.5, 2.25, 2}));
  }
  const std::string missing = (dir / "missing.csv").string();
  TinyGpt m;
  study::Study s = study::record([&] { return m.loss(); });
  CHECK_THROWS_WITH(study::page_html(s, m.gpt, {.logs = {missing}}), Contains("missing.csv"));
  study::Study again = study::record([&] { return m.loss(); });
  study::PageSummary drawn;
  const nlohmann::json data =
      page_json(study::page_html(again, m.gpt, {.logs = {missing}, .skip_unreadable_logs = true}, &drawn));
  CHECK(drawn.logs == 0);
  CHECK_THAT(drawn.curves_note, Contains("could not be drawn") && Contains("missing.csv"));
  CHECK(data["curves_note"] == drawn.curves_note);
  CHECK_THROWS_WITH(study::record([] { return Tensor::zeros({2}); }), Contains("must be a scalar"));
  CHECK_THROWS_WITH(study::record([&] { return m.loss(); },
                                  [](const std::vector<Tensor>&) { return std::vector<study::AttentionMap>{}; }),
                    Contains("2 attention calls labelled as 0 maps"));
  std::filesystem::remove_all(dir);
}
