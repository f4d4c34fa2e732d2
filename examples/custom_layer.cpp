// A layer written outside the library, used in qkv's own models: the RMSNorm
// of my_rmsnorm.cpp (its op's forward and backward, its module, and its
// registration as the norm part "my_rmsnorm": the very file a plugin for the
// qkv program is built from). Here it is checked for gradients, then a small
// GPT is trained on the bundled text twice, once with LayerNorm and once with
// this norm in every block, each run logged, and the second model's study
// page written (custom_layer.html: its attention with dL/dP, its autograd
// graph and both runs' curves). The library has an RMSNorm of its own
// (--norm rmsnorm); this one shows the path a new layer takes. docs/api.md's
// "Add a layer" follows these two files.
// Exits 1 if the gradient check fails or either model does not learn.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "autograd/engine.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "study/page.h"
#include "train/trainer.h"

using namespace qkv;

// 1 and 2, the op and the layer, and their registration: my_rmsnorm.cpp (eps there defaults to 1e-6; a
// default given here too would be given twice where a unity build compiles both files as one).
Tensor my_rms_norm(const Tensor& x, const Tensor& weight, double eps);
void register_my_rmsnorm();

// 3. The check: its gradient against central differences, in float64.
bool check_gradients() {
  register_gradcheck_case(
      {"my_rms_norm", "[3, 5] with a weight",
       [](Generator& g) {
         return std::vector<Tensor>{Tensor::randn({3, 5}, DType::Float64, &g), Tensor::randn({5}, DType::Float64, &g)};
       },
       [](const std::vector<Tensor>& in) { return my_rms_norm(in[0], in[1], 1e-6); }});
  bool ok = true;
  for (const GradcheckCase& c : gradcheck_registry()) {
    if (c.op != "my_rms_norm") continue;
    Generator gen(1);
    GradcheckResult r = gradcheck(c.fn, c.make_inputs(gen), c.options);
    std::printf("gradcheck %s (%s):\n%s", c.op.c_str(), c.label.c_str(), r.summary().c_str());
    ok = ok && r.ok;
  }
  return ok;
}

constexpr int64_t kContext = 32, kBatch = 8;

// The held-out tenth of the text starts here.
int64_t held_out_start(const std::string& text) { return static_cast<int64_t>(text.size()) * 9 / 10; }

// 4. A small byte-level GPT on the bundled text, its blocks built with `norm`:
// 300 steps, the held-out loss every 100, each step logged to custom_layer_<norm>.csv.
double train_gpt(const std::string& text, const std::string& norm, std::unique_ptr<nn::GPT>& trained) {
  manual_seed(1);  // both runs start from the same draws (the norms have no random weights)
  nn::GPTConfig config{.vocab = 256, .context = kContext, .width = 48, .heads = 4, .layers = 2};
  config.parts.norm = norm;
  trained = std::make_unique<nn::GPT>(config);
  nn::GPT& gpt = *trained;
  optim::AdamW opt(gpt.named_parameters(), {.lr = 3e-3});
  optim::ConstantLR schedule(3e-3);
  const std::string log = "custom_layer_" + norm + ".csv";
  train::Trainer trainer(opt, schedule, {.steps = 300, .eval_every = 100, .log = log, .replace_log = true});
  const int64_t held_out = held_out_start(text);
  Generator data(2);
  auto batch = [&](int64_t begin, int64_t end) {  // windows from [begin, end): inputs and the bytes one ahead
    std::vector<int64_t> x, y;
    for (int64_t r = 0; r < kBatch; ++r)
      for (int64_t t = 0, at = begin + static_cast<int64_t>(data.below(end - begin - kContext - 1)); t < kContext; ++t)
        x.push_back(static_cast<unsigned char>(text[at + t])),
            y.push_back(static_cast<unsigned char>(text[at + t + 1]));
    return std::pair{Tensor::from_vector(x, {kBatch, kContext}), Tensor::from_vector(y, {kBatch, kContext})};
  };
  trainer.loss = [&](int64_t) {
    auto [x, y] = batch(0, held_out);
    return train::StepLoss{gpt.loss(x, y), 1, kBatch * kContext};
  };
  trainer.evaluate = [&](int64_t) {
    NoGradGuard no_grad;
    double loss = 0;
    for (int i = 0; i < 8; ++i) {
      auto [x, y] = batch(held_out, static_cast<int64_t>(text.size()));
      loss += gpt.loss(x, y).item() / 8;
    }
    return train::Evaluation{loss, false, false, cat("held-out loss ", loss)};
  };
  trainer.on_step = [&](const train::Progress& p) {
    if (p.evaluation)
      std::printf("%-10s step %3lld  %s\n", norm.c_str(), static_cast<long long>(p.step), p.evaluation->text.c_str());
  };
  return trainer.run().last_metric;
}

// 6. The page of the trained model (study/page.h): its attention on the first held-out window, with dL/dP and
// each head's importance, the autograd graph of that loss, and the curves of both runs' logs.
void write_page(nn::GPT& gpt, const std::string& text) {
  gpt.eval();
  const int64_t at = held_out_start(text);
  std::vector<int64_t> x, y;
  std::vector<std::string> bytes;  // the maps' labels: the bytes the model reads
  for (int64_t t = 0; t < kContext; ++t) {
    x.push_back(static_cast<unsigned char>(text[at + t])), y.push_back(static_cast<unsigned char>(text[at + t + 1]));
    bytes.push_back(text.substr(at + t, 1));
  }
  study::Study s = study::record(
      [&] {
        return gpt.loss(Tensor::from_vector(x, {1, kContext}), Tensor::from_vector(y, {1, kContext}));
      },
      bytes);
  s.what = "cross-entropy of the next byte";
  const study::PageSummary page = study::write_page(
      "custom_layer.html", s, gpt,
      {.title = "a GPT with my_rmsnorm", .logs = {"custom_layer_layernorm.csv", "custom_layer_my_rmsnorm.csv"}});
  std::printf("wrote custom_layer.html (%zu KB): %zu attention maps with dL/dP, a graph of %zu nodes, %zu logs\n",
              page.bytes / 1024, s.maps.size(), page.graph_nodes, page.logs);
}

int main() {
  bool ok = check_gradients();
  // 5. The part: registered under its own name, it is built into every block (and the final norm).
  register_my_rmsnorm();
  std::ifstream file(QKV_TEXT_FILE, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  QKV_CHECK(text.size() > 1000, QKV_TEXT_FILE, ": the bundled text is missing");
  set_num_threads(idle_threads());
  std::unique_ptr<nn::GPT> gpt;
  const double layer_norm = train_gpt(text, "layernorm", gpt), mine = train_gpt(text, "my_rmsnorm", gpt);
  std::printf("held-out loss after 300 steps: layernorm %.4f, my_rmsnorm %.4f (a byte-level model starts at %.2f)\n",
              layer_norm, mine, std::log(256.0));
  std::printf("logs: custom_layer_layernorm.csv custom_layer_my_rmsnorm.csv (draw both: qkv plot FILE FILE)\n");
  write_page(*gpt, text);
  // Both must learn well past the uniform guess over 256 bytes.
  ok = ok && layer_norm < 3.0 && mine < 3.0;
  std::printf("%s\n", ok ? "my_rmsnorm checks out and the GPT built of it learns" : "FAILED");
  return ok ? 0 : 1;
}
