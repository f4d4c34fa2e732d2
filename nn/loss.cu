// Device kernels of cross-entropy: 32 threads per row for log-sum-exp, a
// block of threads adding the rows' losses and counts (a fixed tree: the loss
// does not depend on the run), one per logit for the gradient. The targets
// are checked here (reported, raised at the next read), and the mean's count
// stays on the device: nothing waits for it.
#include <cmath>
#include <limits>

#include "autograd/ops/device_kernels.h"
#include "autograd/ops/kernel.h"
#include "nn/device_kernels.h"

namespace qkv::nn::device {

namespace {

// Whether row r counts: its target is not ignore_index and is a class (one
// that is not was reported by the forward; its row counts as ignored).
QKV_HD inline bool counted(const int64_t* t, int64_t r, int64_t ignore_index, int64_t C) {
  return t[r] != ignore_index && t[r] >= 0 && t[r] < C;
}

// lse[r] = log Σ_c exp(x[r, c]); row_loss[r] = (lse[r] - x[r, t[r]], 1), or
// (0, 0) when ignored. A block of threads per 8 rows, 32 lanes a row (fewer
// lanes for fewer classes): each lane keeps the running max m and Σ e^(x − m)
// of its values, then the lanes fold pairwise, m = max(m₁, m₂),
// s = s₁·e^(m₁−m) + s₂·e^(m₂−m).
template <class T> struct LogSumExpRows {
  static constexpr int kThreads = kernel::kReduceThreads;
  struct Shared {
    double m[kThreads], s[kThreads];
  };
  const T* x;
  const int64_t* t;
  double* lse;
  double* row_loss;  // [rows, 2]: the row's loss, and 1 where it counts
  int64_t rows, C, ignore_index;
  int lanes;
  FaultReport fault;
  // (m, s) with (m2, s2) folded in; −∞ adds nothing, a NaN poisons both.
  QKV_HD static void fold(double& m, double& s, double m2, double s2) {
    const double kNegInf = -std::numeric_limits<double>::infinity();
    const double top = m != m || m2 != m2 ? m + m2 : (m > m2 ? m : m2);
    s = (m == kNegInf ? 0.0 : s * std::exp(m - top)) + (m2 == kNegInf ? 0.0 : s2 * std::exp(m2 - top));
    m = top;
  }
  QKV_HD void operator()(int64_t block, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const kernel::RowLanes pos(block, lanes);  // thread u (t: the targets)
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      if (r < rows && counted(t, r, ignore_index, C))
        for (int64_t c = pos.lane(u); c < C; c += lanes) fold(m, s, x[r * C + c], 1.0);
      sh.m[u] = m, sh.s[u] = s;
    });
    kernel::fold_row_lanes(threads, lanes,
                           [&](int into, int from) { fold(sh.m[into], sh.s[into], sh.m[from], sh.s[from]); });
    threads.each([&](int u) {
      const int64_t r = pos.row(u);
      if (r >= rows || pos.lane(u) != 0) return;
      row_loss[2 * r] = row_loss[2 * r + 1] = 0;
      if (!counted(t, r, ignore_index, C)) {
        if (t[r] != ignore_index) kernel::report_fault(fault, t[r], r);
        return;
      }
      lse[r] = sh.m[u] + std::log(sh.s[u]);
      row_loss[2 * r] = lse[r] - x[r * C + t[r]];
      row_loss[2 * r + 1] = 1;
    });
  }
};

// loss = total·scale, scale = 1/count for the mean (0 when no row counts), 1
// for the sum; the backward reads the same scale.
template <class T> struct FinishLoss {
  const double* totals;  // Σ row losses, count
  T* loss;
  double* scale;
  bool mean;
  QKV_HD void operator()(int64_t) const {
    *scale = mean ? (totals[1] > 0 ? 1.0 / totals[1] : 0.0) : 1.0;
    *loss = static_cast<T>(totals[0] * *scale);
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
  const double* scale;
  QKV_HD void operator()(int64_t i) const {
    int64_t r = i / C, c = i % C;
    if (!counted(t, r, ignore_index, C)) {
      gx[i] = T(0);
      return;
    }
    double s = static_cast<double>(*g) * *scale;
    gx[i] = static_cast<T>(s * std::exp(x[i] - lse[r])) - (c == t[r] ? static_cast<T>(s) : T(0));
  }
};

}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, bool mean,
                   const FaultReport& fault, const Tensor& lse, const Tensor& scale, const Tensor& loss) {
  int64_t C = logits.size(-1), rows = targets.numel();
  Tensor row_loss = Tensor::empty({rows, 2}, DType::Float64, logits.device());
  Tensor totals = Tensor::empty({2}, DType::Float64, logits.device());
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const int lanes = kernel::reduce_width(C);
    kernel::launch_blocks(
        "cross_entropy", logits.device(), kernel::row_blocks(rows, lanes),
        LogSumExpRows<T>{logits.device_data<T>(), targets.device_data<int64_t>(), lse.device_data<double>(),
                         row_loss.device_data<double>(), rows, C, ignore_index, lanes, fault});
    qkv::device::sum_tiles(logits.device(), row_loss.device_data<double>(), totals.device_data<double>(), 1, rows, 2,
                           1.0);
    kernel::launch(
        "cross_entropy", logits.device(), 1,
        FinishLoss<T>{totals.device_data<double>(), loss.device_data<T>(), scale.device_data<double>(), mean});
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& scale,
                            const Tensor& lse, const Tensor& g, const Tensor& gx) {
  int64_t C = logits.size(-1);
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    kernel::launch("cross_entropy_backward", logits.device(), logits.numel(),
                   CrossEntropyBackwardKernel<T>{logits.device_data<T>(), targets.device_data<int64_t>(),
                                                 lse.device_data<double>(), g.device_data<T>(), gx.device_data<T>(), C,
                                                 ignore_index, scale.device_data<double>()});
  });
}

}  // namespace qkv::nn::device
