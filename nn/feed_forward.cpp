#include "nn/feed_forward.h"

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/elementwise_math.h"  // σ without overflow, as sigmoid() computes it
#include "autograd/parallel.h"

namespace qkv::nn {

QKV_DECLARE_OP(swiglu);

MLP::MLP(int64_t width, Generator* gen) {
  fc1 = register_module("fc1", std::make_shared<Linear>(width, 4 * width, true, Init::Normal002, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(4 * width, width, true, Init::Normal002, gen));
}

Tensor MLP::forward(const Tensor& x) const {
  auto scope = this->scope();  // names this module in graph pictures
  return fc2->forward(gelu_tanh(fc1->forward(x)));
}

// With s = σ(a): y = a·s·b;  da = g·b·s·(1 + a·(1 − s)),  db = g·a·s
Tensor swiglu(const Tensor& gate, const Tensor& up) {
  common_device("swiglu", {gate, up});
  QKV_CHECK(gate.shape() == up.shape() && gate.dtype() == up.dtype(), "swiglu: gate ", shape_str(gate.shape()), " ",
            dtype_name(gate.dtype()), " and up ", shape_str(up.shape()), " ", dtype_name(up.dtype()),
            " must have one shape and dtype");
  if (!gate.device().is_cpu()) return mul(mul(gate, sigmoid(gate)), up);  // no device kernel of its own yet
  Tensor y = Tensor::empty(gate.shape(), gate.dtype());
  const int64_t n = gate.numel();
  dispatch_floating(gate.dtype(), "swiglu", [&](auto zero) {
    using T = decltype(zero);
    const T *a = gate.data<T>(), *b = up.data<T>();
    T* out = y.data<T>();
    parallel_for(n, 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = a[i] * math::Sigmoid{}.f(a[i]) * b[i];
    });
  });
  if (needs_grad({gate, up}))
    record("swiglu", y, {gate, up}, [a = gate.detach(), b = up.detach(), n](const Tensor& g) -> std::vector<Tensor> {
      Tensor ga = Tensor::empty(a.shape(), a.dtype()), gb = Tensor::empty(b.shape(), b.dtype());
      dispatch_floating(a.dtype(), "swiglu", [&](auto zero) {
        using T = decltype(zero);
        const T *pa = a.data<T>(), *pb = b.data<T>(), *pg = g.data<T>();
        T *pga = ga.data<T>(), *pgb = gb.data<T>();
        parallel_for(n, 12, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const T s = math::Sigmoid{}.f(pa[i]);
            pga[i] = pg[i] * pb[i] * s * (T(1) + pa[i] * (T(1) - s));
            pgb[i] = pg[i] * pa[i] * s;
          }
        });
      });
      return {ga, gb};
    });
  return y;
}

int64_t swiglu_hidden(int64_t width) {
  const int64_t hidden = (8 * width + 2) / 3;  // ⌈8·width/3⌉
  return (hidden + 7) / 8 * 8;
}

SwiGLU::SwiGLU(int64_t width, Generator* gen) {
  const int64_t hidden = swiglu_hidden(width);
  gate = register_module("gate", std::make_shared<Linear>(width, hidden, false, Init::Normal002, gen));
  up = register_module("up", std::make_shared<Linear>(width, hidden, false, Init::Normal002, gen));
  down = register_module("down", std::make_shared<Linear>(hidden, width, false, Init::Normal002, gen));
}

Tensor SwiGLU::forward(const Tensor& x) const {
  auto scope = this->scope();  // names this module in graph pictures
  return down->forward(swiglu(gate->forward(x), up->forward(x)));
}

}  // namespace qkv::nn
