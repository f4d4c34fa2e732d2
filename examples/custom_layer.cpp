// A layer written outside the library: RMSNorm, y = x / sqrt(mean(x²) + eps) · w,
// with its own forward and backward, registered for gradient checking, and
// used in a small model that learns. The README's "Add a layer" guide
// follows this file. Exits 1 if the gradient check fails or the loss does not fall.
#include <cmath>
#include <cstdio>

#include "autograd/engine.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace qkv;

// 1. The op: forward and backward side by side, declared so record() accepts it.
QKV_DECLARE_OP(rms_norm);

// With r = 1/sqrt(mean(x²) + eps) per row and x̂ = x·r:
//   dx = r · (g⊙w - x̂ · mean(g⊙w⊙x̂)),   dw = Σ_rows g⊙x̂
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6) {
  QKV_CHECK(x.dim() >= 1 && weight.shape() == Shape{x.size(-1)} && x.dtype() == weight.dtype(), "rms_norm: x ",
            shape_str(x.shape()), " and weight ", shape_str(weight.shape()), " do not fit");
  Tensor r = div(1.0, sqrt(add(mean(mul(x, x), {-1}, true), eps)));  // [..., 1]; plain ops, no graph kept
  Tensor xhat = mul(x.detach(), r.detach());
  Tensor y = mul(xhat, weight.detach());
  if (needs_grad({x, weight}))
    record("rms_norm", y, {x, weight},
           [xhat, r = r.detach(), w = weight.detach()](const Tensor& g) -> std::vector<Tensor> {
             Tensor gw_x = mul(g, w);
             Tensor dx = mul(r, sub(gw_x, mul(xhat, mean(mul(gw_x, xhat), {-1}, true))));
             return {dx, sum_to(mul(g, xhat), w.shape())};
           });
  return y;
}

// 2. The layer: a Module holding the weight.
class RMSNorm : public nn::Module {
 public:
  explicit RMSNorm(int64_t dim) { weight = register_parameter("weight", Tensor::ones({dim})); }
  Tensor forward(const Tensor& x) const {
    auto scope = this->scope();  // qkv graph draws its ops in its box
    return rms_norm(x, weight);
  }
  Tensor weight;
};

// 3. A model that uses it: embed, normalise, project to the vocabulary.
class TinyModel : public nn::Module {
 public:
  TinyModel(int64_t vocab, int64_t width) {
    emb = register_module("emb", std::make_shared<nn::Embedding>(vocab, width));
    norm = register_module("norm", std::make_shared<RMSNorm>(width));
    head = register_module("head", std::make_shared<nn::Linear>(width, vocab));
  }
  Tensor forward(const Tensor& ids) const { return head->forward(norm->forward(emb->forward(ids))); }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<nn::Linear> head;
};

int main() {
  // Register the op's gradient check like the library's own ops, then run it.
  register_gradcheck_case(
      {"rms_norm", "[3, 5] with a weight",
       [](Generator& g) {
         return std::vector<Tensor>{Tensor::randn({3, 5}, DType::Float64, &g), Tensor::randn({5}, DType::Float64, &g)};
       },
       [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }});
  bool ok = true;
  for (const GradcheckCase& c : gradcheck_registry()) {
    if (c.op != "rms_norm") continue;
    Generator gen(1);
    GradcheckResult r = gradcheck(c.fn, c.make_inputs(gen), c.options);
    std::printf("gradcheck %s (%s):\n%s", c.op.c_str(), c.label.c_str(), r.summary().c_str());
    ok = ok && r.ok;
  }

  // Train the model to predict the next token of a repeating sequence 0 1 2 ... 7 0 1 ...
  manual_seed(3);
  TinyModel model(8, 16);
  optim::AdamOptions o;
  o.lr = 0.05;
  optim::Adam opt(model.named_parameters(), o);
  Tensor ids = Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7});
  Tensor next = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 0});
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    Tensor loss = nn::cross_entropy(model.forward(ids), next);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 25 == 0 || step == 99) std::printf("step %3d  loss %.4f\n", step, last);
  }
  ok = ok && last < first / 10;
  std::printf("%s\n", ok ? "RMSNorm checks out and the model learns" : "FAILED");
  return ok ? 0 : 1;
}
