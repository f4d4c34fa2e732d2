// Cross-entropy: fused forward and backward side by side.
#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce.h"
#include "autograd/parallel.h"
#include "autograd/simd.h"
#include "nn/device_kernels.h"

namespace qkv::nn {

QKV_DECLARE_OP(cross_entropy);

namespace {
// cross_entropy on a device (nn/loss.cu): the kernels check the targets and
// count the rows, so nothing is copied back (a copy waits for the device).
Tensor device_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, bool mean) {
  Tensor lse = Tensor::empty({targets.numel()}, DType::Float64, logits.device());
  Tensor scale = Tensor::empty({1}, DType::Float64, logits.device());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  FaultReport fault =
      expect_valid(logits.device(), "cross_entropy: target ", cat(" out of range for ", logits.size(-1), " classes"));
  device::cross_entropy(logits, targets, ignore_index, mean, fault, lse, scale, loss);
  if (needs_grad({logits}))
    record("cross_entropy", loss, {logits},
           [x = logits.detach(), targets = targets.to(DType::Int64), lse, ignore_index,
            scale](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
             device::cross_entropy_backward(x, targets, ignore_index, scale, lse, g, gx);
             return {gx};
           });
  return loss;
}
}  // namespace

// loss_row = logsumexp(x) - x[t];  d loss_row / dx = softmax(x) - onehot(t)
// The backward of a float32 row computes softmax as exp(x - max) · exp(-log Σ exp(x - max))
// with the second factor in double: exp(x - float(lse)) would carry lse's
// rounding to float (up to 5e-4 relative at logits of 1e4; torch keeps 3e-8).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  common_device("cross_entropy", {logits, targets});
  QKV_CHECK(logits.dim() >= 1, "cross_entropy: logits need a class dim, got ", shape_str(logits.shape()));
  QKV_CHECK(targets.dtype() == DType::Int64, "cross_entropy: targets must be int64, got ", dtype_name(targets.dtype()));
  Shape rows_shape(logits.shape().begin(), logits.shape().end() - 1);
  QKV_CHECK(targets.shape() == rows_shape, "cross_entropy: targets ", shape_str(targets.shape()),
            " do not match logits ", shape_str(logits.shape()), " (expected ", shape_str(rows_shape), ")");
  int64_t C = logits.size(-1), rows = targets.numel();
  if (!logits.device().is_cpu())
    return device_cross_entropy(logits, targets, ignore_index, reduction == Reduction::Mean);
  const int64_t* t = targets.data<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == ignore_index) continue;
    QKV_CHECK(t[r] >= 0 && t[r] < C, "cross_entropy: target ", t[r], " at position ", r, " out of range for ", C,
              " classes");
    ++count;
  }
  double scale = reduction == Reduction::Mean ? (count ? 1.0 / count : 0.0) : 1.0;
  struct RowStats {
    double max = 0, log_sum = 0;  // lse = max + log_sum
  };
  auto row = std::make_shared<std::vector<RowStats>>(rows);
  double total = 0;
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const T* px = logits.data<T>();
    std::vector<double> row_loss(rows, 0.0);
    parallel_for(rows, 4 * C, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(std::is_same_v<T, float> ? C : 0);
      for (int64_t r = begin; r < end; ++r) {
        if (t[r] == ignore_index) continue;
        const T* x = px + r * C;
        if constexpr (std::is_same_v<T, float>) {
          float top = simd::max(x, C);
          (*row)[r] = {top, std::log(simd::exp_shifted_sum(x, top, scratch.data(), C))};
        } else {
          double top = x[0], sum = 0;
          for (int64_t c = 1; c < C; ++c) top = std::max<double>(top, x[c]);
          for (int64_t c = 0; c < C; ++c) sum += std::exp(x[c] - top);
          (*row)[r] = {top, std::log(sum)};
        }
        row_loss[r] = (*row)[r].max + (*row)[r].log_sum - x[t[r]];
      }
    });
    for (double l : row_loss) total += l;  // in row order: independent of threads
  });
  Tensor loss = Tensor::scalar(total * scale, logits.dtype());
  if (needs_grad({logits}))
    record("cross_entropy", loss, {logits},
           [x = logits.detach(), targets, row, ignore_index, scale, C, rows](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::zeros(x.shape(), x.dtype());
             dispatch_floating(x.dtype(), "cross_entropy", [&](auto zero) {
               using T = decltype(zero);
               const T* px = x.data<T>();
               const int64_t* t = targets.data<int64_t>();
               T* pgx = gx.data<T>();
               double s = g.item() * scale;
               parallel_for(rows, 2 * C, [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   if (t[r] == ignore_index) continue;
                   if constexpr (std::is_same_v<T, float>)
                     simd::exp_shifted_scaled(px + r * C, static_cast<float>((*row)[r].max),
                                              static_cast<float>(s * std::exp(-(*row)[r].log_sum)), pgx + r * C, C);
                   else
                     for (int64_t c = 0; c < C; ++c)
                       pgx[r * C + c] = static_cast<T>(s * std::exp(px[r * C + c] - (*row)[r].max - (*row)[r].log_sum));
                   pgx[r * C + t[r]] -= static_cast<T>(s);
                 }
               });
             });
             return {gx};
           },
           {targets});
  return loss;
}

Tensor attention_entropy(const std::vector<Tensor>& weights) {
  QKV_CHECK(!weights.empty(), "attention_entropy: no attention weights given");
  Tensor total;
  int64_t rows = 0;
  for (const Tensor& p : weights) {
    QKV_CHECK(p.defined() && p.dim() >= 2 && is_floating(p.dtype()),
              "attention_entropy: weights must be float [..., n_q, n_k]");
    Tensor h = neg(sum(mul(p, log(add(p, 1e-12)))));  // Σ over every row of this tensor
    total = total.defined() ? add(total, h) : h;
    rows += p.numel() / std::max<int64_t>(p.size(-1), 1);
  }
  return div(total, static_cast<double>(std::max<int64_t>(rows, 1)));
}

}  // namespace qkv::nn
