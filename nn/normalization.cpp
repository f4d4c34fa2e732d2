// Layer norm and RMS norm: fused forwards and hand-written backwards side by side.
#include "nn/normalization.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/column_sums.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/reduce.h"
#include "autograd/parallel.h"
#include "autograd/simd.h"
#include "nn/device_kernels.h"
#include "nn/normalization_math.h"

namespace qkv::nn {

QKV_DECLARE_OP(layer_norm);
QKV_DECLARE_OP(rms_norm);

namespace {

// The float32 backward, in fixed blocks of kBlockRows rows. Each block writes
// its rows of dx and adds their dw = Σ_rows g ⊙ x̂ and db = Σ_rows g, rows in
// order, into partials of its own; then the partials are added in block order.
// The blocks depend on the row count alone, so the sums have the same bits at
// any thread count, and threads share the blocks, so the sums scale with the
// rows and read x and g in the same pass as dx. (Split by columns instead,
// C / 16 items each walking every row with a stride of C, 2 threads had run
// the sums 0.35-0.87x as fast as one on tiny and small.) Up to 32 rows are
// one block, on one thread: a backward of so few rows is rare.
void backward_by_row_blocks(const float* x, const float* g, const float* w, const std::vector<double>& stats,
                            int64_t rows, int64_t C, float* gx, float* gw, float* gb) {
  constexpr int64_t kBlockRows = 32;  // 16 blocks for mini's 512 rows: one for each of 16 threads
  int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<float> part_w(gw ? blocks * C : 0), part_b(gb ? blocks * C : 0);  // zeros
  parallel_for(blocks, 8 * kBlockRows * C, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      for (int64_t r = b * kBlockRows; r < std::min(rows, (b + 1) * kBlockRows); ++r) {
        float mu = static_cast<float>(stats[2 * r]), rstd = static_cast<float>(stats[2 * r + 1]);
        simd::layer_norm_backward_row(x + r * C, g + r * C, w, mu, rstd, gx + r * C, C);
        if (gw || gb)
          simd::layer_norm_param_grads(x + r * C, g + r * C, mu, rstd, gw ? part_w.data() + b * C : nullptr,
                                       gb ? part_b.data() + b * C : nullptr, C);
      }
  });
  // The partials' column sums, blocks in order: the same additions for any thread count.
  if (gw) column_sums(part_w.data(), blocks, C, C, gw);
  if (gb) column_sums(part_b.data(), blocks, C, C, gb);
}

}  // namespace

// Per row, with x̂ = (x - μ)·r, r = 1/√(σ² + eps), and d = g ⊙ w:
//   dx = r · (d - mean(d) - x̂ · mean(d ⊙ x̂)),  dw = Σ_rows g ⊙ x̂,  db = Σ_rows g
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  common_device("layer_norm", {x, weight, bias});
  QKV_CHECK(x.dim() >= 1, "layer_norm: input must have at least one dim, got ", shape_str(x.shape()));
  int64_t C = x.size(-1), rows = x.numel() / std::max<int64_t>(C, 1);
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      QKV_CHECK((p->shape() == Shape{C} && p->dtype() == x.dtype()), "layer_norm: weight/bias ", shape_str(p->shape()),
                " ", dtype_name(p->dtype()), " do not match input ", shape_str(x.shape()), " ", dtype_name(x.dtype()));
  QKV_CHECK(C > 0, "layer_norm: cannot normalise over a dim of size 0 (input ", shape_str(x.shape()), ")");
  QKV_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  auto stats = std::make_shared<std::vector<double>>();  // μ and r per row
  Tensor device_stats;
  if (!x.device().is_cpu()) {
    device_stats = Tensor::empty({rows, 2}, DType::Float64, x.device());
    device::layer_norm(x, weight, bias, eps, y, device_stats);
  } else {
    stats->resize(2 * rows);
    dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
      using T = decltype(zero);
      const T* px = x.data<T>();
      const T* pw = weight.defined() ? weight.data<T>() : nullptr;
      const T* pb = bias.defined() ? bias.data<T>() : nullptr;
      T* py = y.data<T>();
      parallel_for(rows, 4 * C, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          if constexpr (std::is_same_v<T, float>) {  // vector kernels, same two-pass moments
            double mu, rstd;
            simd::row_moments(px + r * C, C, eps, mu, rstd);
            (*stats)[2 * r] = mu;
            (*stats)[2 * r + 1] = rstd;
            simd::layer_norm_row(px + r * C, static_cast<float>(mu), static_cast<float>(rstd), pw, pb, py + r * C, C);
            continue;
          }
          math::LayerNormRow<T>{px, pw, pb, py, stats->data(), C, eps}(r);  // the device kernels' row
        }
      });
    });
  }
  if (needs_grad({x, weight, bias}))
    record("layer_norm", y, {x, weight, bias},
           [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), stats, device_stats, C, rows,
            want_w = weight.defined() && weight.requires_grad(),
            want_b = bias.defined() && bias.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
             Tensor gw = want_w ? Tensor::zeros({C}, x.dtype(), x.device()) : Tensor();
             Tensor gb = want_b ? Tensor::zeros({C}, x.dtype(), x.device()) : Tensor();
             if (!x.device().is_cpu()) {
               device::layer_norm_backward(x, w, device_stats, g, gx, gw, gb);
               return {gx, gw, gb};
             }
             dispatch_floating(x.dtype(), "layer_norm", [&](auto zero) {
               using T = decltype(zero);
               const T *px = x.data<T>(), *pg = g.data<T>();
               const T* pw = w.defined() ? w.data<T>() : nullptr;
               T* pgx = gx.data<T>();
               T* pgw = gw.defined() ? gw.data<T>() : nullptr;
               T* pgb = gb.defined() ? gb.data<T>() : nullptr;
               if constexpr (std::is_same_v<T, float>) {
                 backward_by_row_blocks(px, pg, pw, *stats, rows, C, pgx, pgw, pgb);
               } else {  // the plain reference, and the device kernels' row and column
                 parallel_for(rows, 6 * C, [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r)
                     math::LayerNormBackwardRow<T>{px, pw, stats->data(), pg, pgx, C}(r);
                 });
                 if (!pgw && !pgb) return;
                 parallel_for(C, 2 * rows, [&](int64_t begin, int64_t end) {  // a column a thread, rows in order
                   for (int64_t c = begin; c < end; ++c)
                     math::LayerNormParamsColumn<T>{px, stats->data(), pg, pgw, pgb, rows, C}(c);
                 });
               }
             });
             return {gx, gw, gb};
           });
  return y;
}

namespace {

// RMS norm of plain ops, for tensors off the CPU (no device kernel of its own yet): the same math.
Tensor rms_norm_composed(const Tensor& x, const Tensor& weight, double eps) {
  Tensor y = mul(x, div(1.0, sqrt(add(mean(mul(x, x), {-1}, true), eps))));
  return weight.defined() ? mul(y, weight) : y;
}

// Row r's y = x·rstd·w, its rstd = 1/√(mean(x²) + eps) kept for backward. Sums in double.
template <class T> void rms_norm_row(const T* x, const T* w, T* y, double* rstd, int64_t r, int64_t C, double eps) {
  const T* in = x + r * C;
  double squares = 0;
  for (int64_t c = 0; c < C; ++c) squares += static_cast<double>(in[c]) * in[c];
  const double rs = 1.0 / std::sqrt(squares / static_cast<double>(C) + eps);
  rstd[r] = rs;
  for (int64_t c = 0; c < C; ++c) {
    const T v = static_cast<T>(in[c] * rs);
    y[r * C + c] = w ? v * w[c] : v;
  }
}

// Row r's dx = rstd·(d − x̂·mean(d ⊙ x̂)), d = g ⊙ w, x̂ = x·rstd.
template <class T>
void rms_norm_backward_row(const T* x, const T* w, const T* g, const double* rstd, T* gx, int64_t r, int64_t C) {
  const T *xr = x + r * C, *gr = g + r * C;
  const double rs = rstd[r];
  double mean_dx = 0;
  for (int64_t c = 0; c < C; ++c) mean_dx += static_cast<double>(gr[c]) * (w ? w[c] : T(1)) * (xr[c] * rs);
  mean_dx /= static_cast<double>(C);
  for (int64_t c = 0; c < C; ++c) {
    const double d = static_cast<double>(gr[c]) * (w ? w[c] : T(1));
    gx[r * C + c] = static_cast<T>(rs * (d - xr[c] * rs * mean_dx));
  }
}

}  // namespace

// Per row, with r = 1/√(mean(x²) + eps), x̂ = x·r and d = g ⊙ w:
//   dx = r · (d − x̂ · mean(d ⊙ x̂)),  dw = Σ_rows g ⊙ x̂
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  common_device("rms_norm", {x, weight});
  QKV_CHECK(x.dim() >= 1 && x.size(-1) > 0, "rms_norm: input must end in a dim of size > 0, got ",
            shape_str(x.shape()));
  const int64_t C = x.size(-1), rows = x.numel() / C;
  QKV_CHECK(!weight.defined() || (weight.shape() == Shape{C} && weight.dtype() == x.dtype()), "rms_norm: weight ",
            shape_str(weight.shape()), " ", dtype_name(weight.dtype()), " does not match input ", shape_str(x.shape()),
            " ", dtype_name(x.dtype()));
  QKV_CHECK(eps >= 0, "rms_norm: eps must be >= 0, got ", eps);
  if (!x.device().is_cpu()) return rms_norm_composed(x, weight, eps);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  auto rstd = std::make_shared<std::vector<double>>(rows);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto zero) {
    using T = decltype(zero);
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    parallel_for(rows, 3 * C, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) rms_norm_row(x.data<T>(), pw, y.data<T>(), rstd->data(), r, C, eps);
    });
  });
  if (needs_grad({x, weight}))
    record("rms_norm", y, {x, weight},
           [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), rstd, C, rows,
            want_w = weight.defined() && weight.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             Tensor gx = Tensor::empty(x.shape(), x.dtype());
             Tensor gw = want_w ? Tensor::empty({C}, x.dtype()) : Tensor();
             dispatch_floating(x.dtype(), "rms_norm", [&](auto zero) {
               using T = decltype(zero);
               const T *px = x.data<T>(), *pg = g.data<T>(), *pw = w.defined() ? w.data<T>() : nullptr;
               parallel_for(rows, 4 * C, [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r)
                   rms_norm_backward_row(px, pw, pg, rstd->data(), gx.data<T>(), r, C);
               });
               if (!gw.defined()) return;
               parallel_for(C, 2 * rows, [&](int64_t begin, int64_t end) {  // a column a thread, rows in order
                 for (int64_t c = begin; c < end; ++c) {
                   double sum = 0;
                   for (int64_t r = 0; r < rows; ++r)
                     sum += static_cast<double>(pg[r * C + c]) * (px[r * C + c] * (*rstd)[r]);
                   gw.data<T>()[c] = static_cast<T>(sum);
                 }
               });
             });
             return {gx, gw};
           });
  return y;
}

RMSNorm::RMSNorm(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  QKV_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  weight = register_parameter("weight", Tensor::ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  auto scope = this->scope();  // names this module in graph pictures
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == dim_, "RMSNorm(", dim_, "): input ", shape_str(x.shape()),
            " does not end in ", dim_);
  return rms_norm(x, weight, eps_);
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool affine) : dim_(dim), eps_(eps) {
  QKV_CHECK(dim > 0, "LayerNorm: dim must be positive, got ", dim);
  if (affine) {
    weight = register_parameter("weight", Tensor::ones({dim}));
    bias = register_parameter("bias", Tensor::zeros({dim}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  auto scope = this->scope();  // names this module in graph pictures
  QKV_CHECK(x.dim() >= 1 && x.size(-1) == dim_, "LayerNorm(", dim_, "): input ", shape_str(x.shape()),
            " does not end in ", dim_);
  return layer_norm(x, weight, bias, eps_);
}

}  // namespace qkv::nn
