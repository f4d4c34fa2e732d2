// Device kernels of the optimizers: one element per thread, running the
// CPU's scalar math (optimizer_math.h); clip_grad_norm's squares a block of
// threads per block of elements. SGD, Adam and clip_grad_norm take up to
// kManyTensors tensors a launch, their pointers in the kernel's arguments
// (as PyTorch's multi-tensor apply): a launch costs microseconds of the
// host's time, and mini has 100 parameters.
#include <utility>
#include <vector>

#include "autograd/ops/kernel.h"
#include "optim/device_kernels.h"

namespace qkv::optim::device {

namespace {

constexpr int kManyTensors = 24;  // ~1.3 KB of pointers: within the 4 KB a kernel's arguments may take

// Items [0, end) cut into the ranges of up to kManyTensors tensors: item i
// is item i − first[k] of range k.
struct Ranges {
  int count = 0;
  int64_t first[kManyTensors + 1] = {};
  void add(int64_t n) { first[count + 1] = first[count] + n, ++count; }
  int64_t end() const { return first[count]; }
  // The last range that starts at or before i (so an empty range is never it).
  QKV_HD int find(int64_t i) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first[mid] <= i)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

// Runs launch(indices) for each run of up to kManyTensors of `n` tensors
// that share a device and a dtype (key(i)), in order within each.
template <class Key, class Launch> void in_groups(size_t n, const Key& key, const Launch& launch) {
  std::vector<bool> taken(n, false);
  for (size_t first = 0; first < n; ++first) {
    if (taken[first]) continue;
    std::vector<size_t> group;
    for (size_t i = first; i < n; ++i) {
      if (taken[i] || key(i) != key(first)) continue;
      taken[i] = true;
      group.push_back(i);
      if (group.size() == kManyTensors) launch(group), group.clear();
    }
    if (!group.empty()) launch(group);
  }
}

// Adam on the elements of up to kManyTensors parameters (AdamItem each).
template <class T> struct AdamMany {
  AdamStep s;
  Ranges ranges;
  T* p[kManyTensors];
  const T* g[kManyTensors];
  T* m[kManyTensors];
  T* v[kManyTensors];
  double shrink[kManyTensors];
  QKV_HD void operator()(int64_t i) const {
    const int k = ranges.find(i);
    AdamStep step = s;
    step.shrink = shrink[k];
    math::AdamItem<T>{step, p[k], g[k], m[k], v[k]}(i - ranges.first[k]);
  }
};

// SGD on the elements of up to kManyTensors parameters (SGDItem each).
template <class T> struct SGDMany {
  SGDStep s;
  Ranges ranges;
  T* p[kManyTensors];
  const T* g[kManyTensors];
  T* b[kManyTensors];  // null without momentum
  bool fresh[kManyTensors];
  QKV_HD void operator()(int64_t i) const {
    const int k = ranges.find(i);
    SGDStep step = s;
    step.first = fresh[k];
    math::SGDItem<T>{step, p[k], g[k], b[k]}(i - ranges.first[k]);
  }
};

// g *= factor on the elements of up to kManyTensors gradients.
template <class T> struct ScaleMany {
  Ranges ranges;
  T* g[kManyTensors];
  double factor;
  QKV_HD void operator()(int64_t i) const {
    const int k = ranges.find(i);
    math::ScaleItem<T>{g[k], factor}(i - ranges.first[k]);
  }
};

}  // namespace

void sgd_steps(const SGDStep& s, const std::vector<SGDTensors>& params) {
  auto key = [&](size_t i) { return std::make_pair(params[i].param.device(), params[i].param.dtype()); };
  in_groups(params.size(), key, [&](const std::vector<size_t>& group) {
    const Tensor& first = params[group[0]].param;
    dispatch_floating(first.dtype(), "SGD", [&](auto zero) {
      using T = decltype(zero);
      SGDMany<T> many{s, {}, {}, {}, {}, {}};
      for (size_t i : group) {
        const SGDTensors& t = params[i];
        const int k = many.ranges.count;
        many.p[k] = t.param.device_data<T>(), many.g[k] = t.grad.device_data<T>();
        many.b[k] = t.buffer.defined() ? t.buffer.device_data<T>() : nullptr, many.fresh[k] = t.first;
        many.ranges.add(t.param.numel());
      }
      kernel::launch("sgd", first.device(), many.ranges.end(), many);
    });
  });
}

void adam_steps(const AdamStep& s, const std::vector<AdamTensors>& params) {
  auto key = [&](size_t i) { return std::make_pair(params[i].param.device(), params[i].param.dtype()); };
  in_groups(params.size(), key, [&](const std::vector<size_t>& group) {
    const Tensor& first = params[group[0]].param;
    dispatch_floating(first.dtype(), "Adam", [&](auto zero) {
      using T = decltype(zero);
      AdamMany<T> many{s, {}, {}, {}, {}, {}, {}};
      for (size_t i : group) {
        const AdamTensors& a = params[i];
        const int k = many.ranges.count;
        many.p[k] = a.param.device_data<T>(), many.g[k] = a.grad.device_data<T>();
        many.m[k] = a.m.device_data<T>(), many.v[k] = a.v.device_data<T>(), many.shrink[k] = a.shrink;
        many.ranges.add(a.param.numel());
      }
      kernel::launch("adam", first.device(), many.ranges.end(), many);
    });
  });
}

namespace {

// Σ g² over each block of `block` elements of up to kManyTensors gradients,
// a block of threads each: every thread sums a strided 256th in double, then
// the threads' sums add up a tree (a fixed order: the same sum on every run).
// Block b is gradient k's block b − first[k], its sum out[at[k] + that].
template <class T> struct SquaresMany {
  static constexpr int kThreads = 256;
  struct Shared {
    double sums[kThreads];
  };
  Ranges ranges;  // of blocks
  const T* g[kManyTensors];
  int64_t n[kManyTensors], at[kManyTensors];
  double* out;
  int64_t block;
  QKV_HD void operator()(int64_t b, Shared& sh, const kernel::BlockThreads<kThreads>& threads) const {
    const int k = ranges.find(b);
    const int64_t local = b - ranges.first[k], begin = local * block, end = begin + block < n[k] ? begin + block : n[k];
    threads.each([&](int t) {
      double s = 0;
      for (int64_t i = begin + t; i < end; i += kThreads) s += static_cast<double>(g[k][i]) * g[k][i];
      sh.sums[t] = s;
    });
    for (int half = kThreads / 2; half > 0; half /= 2)
      threads.each([&](int t) {
        if (t < half) sh.sums[t] += sh.sums[t + half];
      });
    threads.each([&](int t) {
      if (t == 0) out[at[k] + local] = sh.sums[0];
    });
  }
};

}  // namespace

void squared_block_sums(const std::vector<Tensor>& grads, int64_t block, const Tensor& out) {
  std::vector<int64_t> at(grads.size() + 1, 0);
  for (size_t i = 0; i < grads.size(); ++i) at[i + 1] = at[i] + (grads[i].numel() + block - 1) / block;
  auto key = [&](size_t i) { return grads[i].dtype(); };
  in_groups(grads.size(), key, [&](const std::vector<size_t>& group) {
    const Tensor& first = grads[group[0]];
    dispatch_floating(first.dtype(), "clip_grad_norm", [&](auto zero) {
      using T = decltype(zero);
      SquaresMany<T> many{{}, {}, {}, {}, out.device_data<double>(), block};
      for (size_t i : group) {
        const int k = many.ranges.count;
        many.g[k] = grads[i].device_data<T>(), many.n[k] = grads[i].numel(), many.at[k] = at[i];
        many.ranges.add(at[i + 1] - at[i]);
      }
      kernel::launch_blocks("clip_grad_norm", first.device(), many.ranges.end(), many);
    });
  });
}

void scale(const std::vector<Tensor>& grads, double factor) {
  auto key = [&](size_t i) { return std::make_pair(grads[i].device(), grads[i].dtype()); };
  in_groups(grads.size(), key, [&](const std::vector<size_t>& group) {
    const Tensor& first = grads[group[0]];
    dispatch_floating(first.dtype(), "clip_grad_norm", [&](auto zero) {
      using T = decltype(zero);
      ScaleMany<T> many{{}, {}, factor};
      for (size_t i : group) {
        many.g[many.ranges.count] = grads[i].device_data<T>();
        many.ranges.add(grads[i].numel());
      }
      kernel::launch("clip_grad_norm_scale", first.device(), many.ranges.end(), many);
    });
  });
}

}  // namespace qkv::optim::device
