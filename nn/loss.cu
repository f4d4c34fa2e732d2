// Device kernels of cross-entropy: one thread per row for log-sum-exp, a
// block of threads adding the rows' losses (a fixed tree: the loss does not
// depend on the run), one per logit for the gradient.
#include <cmath>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"
#include "nn/device_kernels.h"

namespace qkv::nn::device {

namespace {

// lse[r] = log Σ_c exp(x[r, c]); row_loss[r] = lse[r] - x[r, t[r]] (0 when ignored)
template <class T> struct LogSumExpKernel {
  const T* x;
  const int64_t* t;
  double* lse;
  double* row_loss;
  int64_t C, ignore_index;
  QKV_HD void operator()(int64_t r) const {
    row_loss[r] = 0;
    if (t[r] == ignore_index) return;
    const T* row = x + r * C;
    double top = row[0], sum = 0;
    for (int64_t c = 1; c < C; ++c) top = top > row[c] ? top : static_cast<double>(row[c]);
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - top);
    lse[r] = top + std::log(sum);
    row_loss[r] = lse[r] - row[t[r]];
  }
};

// gx[r, c] = g·scale·(exp(x[r, c] - lse[r]) - [c = t[r]]), 0 on ignored rows
template <class T> struct CrossEntropyBackwardKernel {
  const T* x;
  const int64_t* t;
  const double* lse;
  const T* g;
  T* gx;
  int64_t C, ignore_index;
  double scale;
  QKV_HD void operator()(int64_t i) const {
    int64_t r = i / C, c = i % C;
    if (t[r] == ignore_index) {
      gx[i] = T(0);
      return;
    }
    double s = static_cast<double>(*g) * scale;
    gx[i] = static_cast<T>(s * std::exp(x[i] - lse[r])) - (c == t[r] ? static_cast<T>(s) : T(0));
  }
};

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double scale, const Tensor& lse,
                   const Tensor& loss) {
  int64_t C = logits.size(-1), rows = targets.numel();
  Tensor row_loss = Tensor::empty({rows}, DType::Float64, logits.device());
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("cross_entropy", logits.device(), rows,
                   LogSumExpKernel<T>{logits.device_data<T>(), targets.device_data<int64_t>(),
                                      lse.device_data<double>(), row_loss.device_data<double>(), C, ignore_index});
    qkv::device::sum_tiles(logits.device(), row_loss.device_data<double>(), loss.device_data<T>(), 1, rows, 1, scale);
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double scale,
                            const Tensor& lse, const Tensor& g, const Tensor& gx) {
  int64_t C = logits.size(-1);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("cross_entropy_backward", logits.device(), logits.numel(),
                   CrossEntropyBackwardKernel<T>{logits.device_data<T>(), targets.device_data<int64_t>(),
                                                 lse.device_data<double>(), g.device_data<T>(), gx.device_data<T>(), C,
                                                 ignore_index, scale});
  });
}

}  // namespace qkv::nn::device
