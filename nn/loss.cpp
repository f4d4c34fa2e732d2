// Cross-entropy: fused forward and backward side by side.
#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/parallel.h"
#include "autograd/simd.h"
#include "nn/device_kernels.h"

namespace qkv::nn {

QKV_DECLARE_OP(cross_entropy);
QKV_DECLARE_OP(linear_cross_entropy);

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
// A row's log-sum-exp as max + log Σ exp(x - max). A float row's sum is taken in double over its exp(x - max),
// which are written to `exps` (C values; may be x itself); a float64 row is summed as it is (`exps` unused).
struct RowStats {
  double max = 0, log_sum = 0;
};
template <class T> RowStats row_stats(const T* x, int64_t C, T* exps) {
  if constexpr (std::is_same_v<T, float>) {
    const float top = simd::max(x, C);
    return {top, std::log(simd::exp_shifted_sum(x, top, exps, C))};
  } else {
    double top = x[0], sum = 0;
    for (int64_t c = 1; c < C; ++c) top = std::max<double>(top, x[c]);
    for (int64_t c = 0; c < C; ++c) sum += std::exp(x[c] - top);
    return {top, std::log(sum)};
  }
}

// The factor each counted row's loss takes (1 / their count for a mean), once every target is checked.
double loss_scale(const char* op, const int64_t* t, int64_t rows, int64_t classes, int64_t ignore_index,
                  Reduction reduction) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (t[r] == ignore_index) continue;
    QKV_CHECK(t[r] >= 0 && t[r] < classes, op, ": target ", t[r], " at position ", r, " out of range for ", classes,
              " classes");
    ++count;
  }
  return reduction == Reduction::Mean ? (count ? 1.0 / count : 0.0) : 1.0;
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
  double scale = loss_scale("cross_entropy", t, rows, C, ignore_index, reduction);
  auto row = std::make_shared<std::vector<RowStats>>(rows);
  double total = 0;
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const T* px = logits.data<T>();
    std::vector<double> row_loss(rows, 0.0);
    parallel_for(rows, 4 * C, [&](int64_t begin, int64_t end) {
      std::vector<T> scratch(std::is_same_v<T, float> ? C : 0);
      for (int64_t r = begin; r < end; ++r) {
        if (t[r] == ignore_index) continue;
        const T* x = px + r * C;
        (*row)[r] = row_stats(x, C, scratch.data());
        row_loss[r] = (*row)[r].max + (*row)[r].log_sum - x[t[r]];
      }
    });
    for (double l : row_loss) total += l;  // in row order: independent of threads
  });
  Tensor loss = Tensor::scalar(total * scale, logits.dtype());
  if (needs_grad({logits}))
    record("cross_entropy", loss, {logits},
           [x = logits.detach(), targets, row, ignore_index, scale, C, rows](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::empty(x.shape(), x.dtype());  // every row written below (an ignored one with zeros)
             dispatch_floating(x.dtype(), "cross_entropy", [&](auto zero) {
               using T = decltype(zero);
               const T* px = x.data<T>();
               const int64_t* t = targets.data<int64_t>();
               T* pgx = gx.data<T>();
               double s = g.item() * scale;
               parallel_for(rows, 2 * C, [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   if (t[r] == ignore_index) {
                     std::fill_n(pgx + r * C, C, T(0));
                     continue;
                   }
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

namespace {

// Rows of logits made at once: all of them where they fit the budget, else equal blocks that do.
int64_t rows_per_block(int64_t rows, int64_t classes, int64_t max_logits) {
  const int64_t fit = std::max<int64_t>(1, max_logits / std::max<int64_t>(classes, 1));  // rows within the budget
  const int64_t blocks = std::max<int64_t>(1, (rows + fit - 1) / fit);
  return std::max<int64_t>(1, (rows + blocks - 1) / blocks);
}

// One block's row losses and, with `grad`, each row's logits replaced by their gradient for an output gradient
// of 1: s·softmax - s·onehot(t), s the loss's scale (an ignored row: zeros). The float path writes the
// softmax's exponentials where the logits were and scales them: the bits of cross_entropy's backward
// (exp_shifted_scaled multiplies the same two rounded factors).
template <class T> void block_losses(T* logits, const int64_t* t, int64_t rows, int64_t C, int64_t ignore_index,
                                     double s, bool grad, double* row_loss) {
  parallel_for(rows, 4 * C, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* x = logits + r * C;
      row_loss[r] = 0;
      if (t[r] == ignore_index) {
        if (grad) std::fill_n(x, C, T(0));
        continue;
      }
      const T target = x[t[r]];
      const RowStats row = row_stats(x, C, x);  // a float row now holds exp(x - max)
      row_loss[r] = row.max + row.log_sum - target;
      if (!grad) continue;
      if constexpr (std::is_same_v<T, float>)
        simd::scale(x, static_cast<float>(s * std::exp(-row.log_sum)), C);
      else
        for (int64_t c = 0; c < C; ++c) x[c] = static_cast<T>(s * std::exp(x[c] - row.max - row.log_sum));
      x[t[r]] -= static_cast<T>(s);
    }
  });
}

// What the fused head and loss make: the loss's sum of rows, and the gradients (undefined where not wanted).
struct HeadLoss {
  double total = 0;
  Tensor gx, gw;
};

// logits = x·wᵀ a block of rows at a time; per block the row losses, then (for the gradients) the
// gradient into the logits, gx's rows = d·w, and gw += dᵀ·x_block (the first block writes it).
template <class T> HeadLoss head_loss_blocks(const Tensor& x, const Tensor& w, const int64_t* t, int64_t ignore_index,
                                             double s, int64_t max_logits, bool want_gx, bool want_gw) {
  const int64_t N = x.size(0), C = x.size(1), V = w.size(0);
  const int64_t R = rows_per_block(N, V, max_logits);
  HeadLoss out;
  if (want_gx) out.gx = Tensor::empty({N, C}, x.dtype());
  if (want_gw) out.gw = N > 0 ? Tensor::empty({V, C}, x.dtype()) : Tensor::zeros({V, C}, x.dtype());
  const bool grad = want_gx || want_gw;
  Tensor logits = Tensor::empty({std::min(R, N), V}, x.dtype());
  std::vector<double> row_loss(std::min(R, N));
  const T *px = x.data<T>(), *pw = w.data<T>();
  T* pl = logits.data<T>();
  for (int64_t first = 0; first < N; first += R) {
    const int64_t rows = std::min(R, N - first);
    const T* xb = px + first * C;
    gemm<T>(false, true, rows, V, C, xb, C, pw, C, pl, V, T(0));
    block_losses<T>(pl, t + first, rows, V, ignore_index, s, grad, row_loss.data());
    for (int64_t r = 0; r < rows; ++r) out.total += row_loss[r];  // in row order: independent of threads
    if (want_gx) gemm<T>(false, false, rows, C, V, pl, V, pw, C, out.gx.data<T>() + first * C, C, T(0));
    if (want_gw) gemm<T>(true, false, V, C, rows, pl, V, xb, C, out.gw.data<T>(), C, first == 0 ? T(0) : T(1));
  }
  return out;
}

}  // namespace

// loss = Σ_rows s·(logsumexp(x·wᵀ) - (x·wᵀ)[t]);  with d = s·(softmax - onehot(t)):  dx = d·w,  dw = dᵀ·x
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index,
                            Reduction reduction, int64_t max_logits) {
  common_device("linear_cross_entropy", {x, weight, targets});
  QKV_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1), "linear_cross_entropy: input ",
            shape_str(x.shape()), " and weight ", shape_str(weight.shape()), " do not fit (weight is [classes, in])");
  QKV_CHECK(x.dtype() == weight.dtype() && is_floating(x.dtype()),
            "linear_cross_entropy: input and weight must be one float dtype, got ", dtype_name(x.dtype()), " and ",
            dtype_name(weight.dtype()));
  QKV_CHECK(targets.dtype() == DType::Int64, "linear_cross_entropy: targets must be int64, got ",
            dtype_name(targets.dtype()));
  Shape rows_shape(x.shape().begin(), x.shape().end() - 1);
  QKV_CHECK(targets.shape() == rows_shape, "linear_cross_entropy: targets ", shape_str(targets.shape()),
            " do not match input ", shape_str(x.shape()), " (expected ", shape_str(rows_shape), ")");
  QKV_CHECK(max_logits > 0, "linear_cross_entropy: max_logits must be positive, got ", max_logits);
  const int64_t C = x.size(-1), V = weight.size(0), N = targets.numel();
  if (!x.device().is_cpu())
    return cross_entropy(matmul(reshape(x, {N, C}), weight, false, true), reshape(targets, {N}), ignore_index,
                         reduction);
  const int64_t* t = targets.data<int64_t>();
  const double scale = loss_scale("linear_cross_entropy", t, N, V, ignore_index, reduction);
  const bool grad = needs_grad({x, weight});
  HeadLoss made;
  dispatch_floating(x.dtype(), "linear_cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    made = head_loss_blocks<T>(reshape(x.detach(), {N, C}), weight.detach(), t, ignore_index, scale, max_logits,
                               grad && x.requires_grad(), grad && weight.requires_grad());
  });
  Tensor loss = Tensor::scalar(made.total * scale, x.dtype());
  if (grad)
    record("linear_cross_entropy", loss, {x, weight},
           [gx = made.gx, gw = made.gw, xs = x.shape()](const Tensor& g) -> std::vector<Tensor> {
             const double by = g.item();  // 1 for loss.backward(): the gradients as made
             auto scaled = [by](const Tensor& d) { return !d.defined() || by == 1 ? d : mul(d, by); };
             return {gx.defined() ? reshape(scaled(gx), xs) : Tensor(), scaled(gw)};
           });
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
