// A norm of one's own: RMSNorm, y = x / sqrt(mean(x²) + eps) · w, its op's
// forward and backward side by side, registered as the norm part
// "my_rmsnorm". The same file is both a plugin for the qkv program, built as
// a shared library against the installed qkv (tests/consumer/CMakeLists.txt)
// and loaded with
//   qkv train --plugin ./libmy_rmsnorm.so --norm my_rmsnorm
// and part of a program of its own (custom_layer.cpp, which calls
// register_my_rmsnorm() and checks my_rms_norm's gradient).
#include <nn/nn.h>
#include <nn/plugin.h>

using namespace qkv;

QKV_DECLARE_OP(my_rms_norm);

// With r = 1/sqrt(mean(x²) + eps) per row and x̂ = x·r:
//   dx = r · (g⊙w - x̂ · mean(g⊙w⊙x̂)),   dw = Σ_rows g⊙x̂
Tensor my_rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6) {
  QKV_CHECK(x.dim() >= 1 && weight.shape() == Shape{x.size(-1)} && x.dtype() == weight.dtype(), "my_rms_norm: x ",
            shape_str(x.shape()), " and weight ", shape_str(weight.shape()), " do not fit");
  Tensor r = div(1.0, sqrt(add(mean(mul(x, x), {-1}, true), eps)));  // [..., 1]
  Tensor xhat = mul(x.detach(), r.detach());
  Tensor y = mul(xhat, weight.detach());
  if (needs_grad({x, weight}))
    record("my_rms_norm", y, {x, weight},
           [xhat, r = r.detach(), w = weight.detach()](const Tensor& g) -> std::vector<Tensor> {
             Tensor gw_x = mul(g, w);
             Tensor dx = mul(r, sub(gw_x, mul(xhat, mean(mul(gw_x, xhat), {-1}, true))));
             return {dx, sum_to(mul(g, xhat), w.shape())};
           });
  return y;
}

class MyRMSNorm : public nn::Norm {
 public:
  explicit MyRMSNorm(int64_t dim) { weight = register_parameter("weight", Tensor::ones({dim})); }
  Tensor forward(const Tensor& x) const override {
    auto scope = this->scope();  // qkv graph draws its ops in its box
    return my_rms_norm(x, weight);
  }
  Tensor weight;
};

void register_my_rmsnorm() {
  nn::register_norm_part({"my_rmsnorm", "RMSNorm of a plugin's own",
                          [](int64_t width) -> std::shared_ptr<nn::Norm> { return std::make_shared<MyRMSNorm>(width); },
                          [](double width) { return width; }});  // its parameter count: one weight per channel
}

QKV_PLUGIN("my_rmsnorm", "an RMSNorm norm part", register_my_rmsnorm)
