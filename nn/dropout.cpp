// Inverted dropout, composed: y = x ⊙ m with m ∈ {0, 1/(1-p)}, so the
// gradient g ⊙ m comes from mul's backward.
#include "nn/dropout.h"

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"

namespace qkv::nn {

QKV_DECLARE_OP(dropout);

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  QKV_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0);
  Generator& g = gen ? *gen : default_generator();
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    T* pm = mask.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    for (int64_t i = 0, n = mask.numel(); i < n; ++i) pm[i] = g.uniform() >= p ? scale : T(0);
  });
  return mul(x, mask.to(x.device()));  // made on the host: the same mask on every device
}

Dropout::Dropout(double p, Generator* gen) : p_(p), gen_(gen) {
  QKV_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}

}  // namespace qkv::nn
