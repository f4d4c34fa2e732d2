// The library's gradient-check cases: at least two per differentiable op,
// broadcasting and odd dims included. Inputs avoid kinks (relu, abs at 0)
// and ties (max), where a derivative is not defined.
#include "autograd/gradcheck_registry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/ops/attention.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "autograd/recompute.h"

namespace qkv {

namespace {

constexpr DType F64 = DType::Float64;
using Inputs = std::vector<Tensor>;
using MakeInputs = std::function<Inputs(Generator&)>;

Tensor normal(Generator& g, const Shape& s) { return Tensor::randn(s, F64, &g); }
Tensor positive(Generator& g, const Shape& s) { return Tensor::uniform(s, 0.5, 2.0, F64, &g); }

// Magnitudes in [0.2, 1] with random signs: far from the kink at 0.
Tensor nonzero(Generator& g, const Shape& s) {
  Tensor t = Tensor::uniform(s, 0.2, 1.0, F64, &g);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (g.uniform() < 0.5) p[i] = -p[i];
  return t;
}

// Values at least 0.05 apart in random order: no ties for max.
Tensor distinct(Generator& g, const Shape& s) {
  Tensor t = Tensor::empty(s, F64);
  double* p = t.data<double>();
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = 0.1 * (i - n / 2.0) + 0.05 * g.uniform();
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[static_cast<int64_t>(g.below(i + 1))]);
  return t;
}

Tensor bools(const std::vector<bool>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor indices(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }

// Inputs of one tensor, or of two, drawn from `g` in order.
template <class Make> MakeInputs one(Make make, Shape s) {
  return [=](Generator& g) { return Inputs{make(g, s)}; };
}
template <class MakeA, class MakeB> MakeInputs pair(MakeA make_a, Shape sa, MakeB make_b, Shape sb) {
  return [=](Generator& g) { return Inputs{make_a(g, sa), make_b(g, sb)}; };
}

// Appends cases to the list in the order it is called: the registry's order.
struct CaseAdder {
  std::vector<GradcheckCase>& cases;
  void operator()(std::string op, std::string label, MakeInputs make, TensorFn fn) const {
    cases.push_back({std::move(op), std::move(label), std::move(make), std::move(fn)});
  }
};

// Elementwise arithmetic: tensor with tensor (broadcasting), and tensor with scalar.
void add_arithmetic_cases(const CaseAdder& add_case) {
  // ---- elementwise, binary with broadcasting ----
  struct Binary {
    const char* op;
    Tensor (*fn)(const Tensor&, const Tensor&);
  };
  for (Binary b : {Binary{"add", add}, Binary{"sub", sub}, Binary{"mul", mul}, Binary{"div", div}}) {
    auto f = b.fn;
    auto rhs = std::string(b.op) == "div" ? nonzero : normal;
    TensorFn fn = [f](const Inputs& x) { return f(x[0], x[1]); };
    add_case(b.op, "same shape [3, 4]", pair(normal, {3, 4}, rhs, {3, 4}), fn);
    add_case(b.op, "broadcast [3, 1] with [4]", pair(normal, {3, 1}, rhs, {4}), fn);
    add_case(b.op, "broadcast [2, 1, 3] with [4, 1]", pair(normal, {2, 1, 3}, rhs, {4, 1}), fn);
    add_case(b.op, "0-d with [2, 3]", pair(normal, {}, rhs, {2, 3}), fn);
  }

  // ---- elementwise, tensor-scalar ----
  add_case("add_scalar", "x + 1.5", one(normal, {3, 4}), [](const Inputs& x) { return x[0] + 1.5; });
  add_case("add_scalar", "-0.5 + x, 0-d", one(normal, {}), [](const Inputs& x) { return -0.5 + x[0]; });
  add_case("sub_scalar", "x - 2", one(normal, {3, 4}), [](const Inputs& x) { return x[0] - 2.0; });
  add_case("sub_scalar", "x - 0.25, rank 3", one(normal, {2, 2, 3}), [](const Inputs& x) { return x[0] - 0.25; });
  add_case("rsub_scalar", "2 - x", one(normal, {3, 4}), [](const Inputs& x) { return 2.0 - x[0]; });
  add_case("rsub_scalar", "-1 - x, rank 1", one(normal, {5}), [](const Inputs& x) { return -1.0 - x[0]; });
  add_case("mul_scalar", "x * 3", one(normal, {3, 4}), [](const Inputs& x) { return x[0] * 3.0; });
  add_case("mul_scalar", "-0.5 * x", one(normal, {2, 5}), [](const Inputs& x) { return -0.5 * x[0]; });
  add_case("div_scalar", "x / 4", one(normal, {3, 4}), [](const Inputs& x) { return x[0] / 4.0; });
  add_case("div_scalar", "x / -0.3", one(normal, {6}), [](const Inputs& x) { return x[0] / -0.3; });
  add_case("rdiv_scalar", "2 / x", one(nonzero, {3, 4}), [](const Inputs& x) { return 2.0 / x[0]; });
  add_case("rdiv_scalar", "-1 / x", one(nonzero, {2, 3}), [](const Inputs& x) { return -1.0 / x[0]; });
}

// Elementwise functions of one tensor.
void add_unary_cases(const CaseAdder& add_case) {
  struct Unary {
    const char* op;
    Tensor (*fn)(const Tensor&);
    Tensor (*make)(Generator&, const Shape&);
  };
  for (Unary u : {Unary{"neg", neg, normal}, Unary{"exp", exp, normal}, Unary{"log", log, positive},
                  Unary{"sqrt", sqrt, positive}, Unary{"tanh", tanh, normal}, Unary{"relu", relu, nonzero},
                  Unary{"sigmoid", sigmoid, normal}, Unary{"abs", abs, nonzero}, Unary{"clone", clone, normal},
                  Unary{"gelu", gelu, normal}, Unary{"gelu_tanh", gelu_tanh, normal}}) {
    auto f = u.fn;
    TensorFn fn = [f](const Inputs& x) { return f(x[0]); };
    add_case(u.op, "[3, 4]", one(u.make, {3, 4}), fn);
    add_case(u.op, "[2, 3, 2]", one(u.make, {2, 3, 2}), fn);
  }
  add_case("pow", "x^2.5, x > 0", one(positive, {3, 4}), [](const Inputs& x) { return pow(x[0], 2.5); });
  add_case("pow", "x^3", one(normal, {2, 3}), [](const Inputs& x) { return pow(x[0], 3.0); });
  add_case("pow", "x^-1.5, x > 0", one(positive, {4}), [](const Inputs& x) { return pow(x[0], -1.5); });
}

// Between devices: through cuda:0 where a GPU is, else through the CPU
// itself (tests/test_device.cpp checks the copy both ways on any machine).
void add_device_transfer_cases(const CaseAdder& add_case) {
  Device far = cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  add_case("to_device", cat("[3, 4] to ", far.str(), " and back"), one(normal, {3, 4}),
           [far](const Inputs& x) { return x[0].to(far).to(Device::cpu()); });
  add_case("to_device", cat("two round trips through ", far.str(), ", added"), one(normal, {2, 3, 2}),
           [far](const Inputs& x) { return add(x[0].to(far).to(Device::cpu()), x[0].to(far).to(Device::cpu())); });
}

void add_reduction_cases(const CaseAdder& add_case) {
  add_case("sum", "all dims", one(normal, {3, 4}), [](const Inputs& x) { return sum(x[0]); });
  add_case("sum", "dim 1 keepdim", one(normal, {2, 3, 4}), [](const Inputs& x) { return sum(x[0], {1}, true); });
  add_case("sum", "dims {0, 2} (not adjacent)", one(normal, {2, 3, 4}), [](const Inputs& x) {
    return sum(x[0], {0, 2});
  });
  add_case("sum", "dims {-1, -2}", one(normal, {2, 3, 4}), [](const Inputs& x) { return sum(x[0], {-1, -2}); });
  // Long sums: a device adds them with a block of threads per output (kernel::add_lanes).
  add_case("sum", "dim 1 of 70, 37 columns", one(normal, {2, 70, 37}), [](const Inputs& x) { return sum(x[0], {1}); });
  add_case("sum", "all 300", one(normal, {300}), [](const Inputs& x) { return sum(x[0]); });
  add_case("mean", "all dims", one(normal, {3, 4}), [](const Inputs& x) { return mean(x[0]); });
  add_case("mean", "dims {0, 2} keepdim", one(normal, {2, 3, 4}), [](const Inputs& x) {
    return mean(x[0], {0, 2}, true);
  });
  add_case("max", "all dims", one(distinct, {3, 4}), [](const Inputs& x) { return max(x[0]); });
  add_case("max", "dim 1", one(distinct, {2, 3, 4}), [](const Inputs& x) { return max(x[0], {1}); });
  add_case("max", "dims {0, 2} keepdim", one(distinct, {2, 3, 4}), [](const Inputs& x) {
    return max(x[0], {0, 2}, true);
  });
  add_case("var", "dim 1", one(normal, {3, 5}), [](const Inputs& x) { return var(x[0], {1}); });
  add_case("var", "dims {0, 2} keepdim, correction 0", one(normal, {2, 3, 4}), [](const Inputs& x) {
    return var(x[0], {0, 2}, true, 0);
  });
  add_case("sum_to", "[2, 3, 4] to [3, 1]", one(normal, {2, 3, 4}), [](const Inputs& x) {
    return sum_to(x[0], {3, 1});
  });
  add_case("sum_to", "[2, 3, 4] to [4]", one(normal, {2, 3, 4}), [](const Inputs& x) { return sum_to(x[0], {4}); });
}

// Shape ops that move, reshape, join or pool a tensor.
void add_shape_cases(const CaseAdder& add_case) {
  add_case("reshape", "[2, 3, 4] to [6, -1]", one(normal, {2, 3, 4}), [](const Inputs& x) {
    return reshape(x[0], {6, -1});
  });
  add_case("reshape", "[6] to [1, 2, 3]", one(normal, {6}), [](const Inputs& x) { return reshape(x[0], {1, 2, 3}); });
  add_case("unsqueeze", "dim 1", one(normal, {2, 3}), [](const Inputs& x) { return unsqueeze(x[0], 1); });
  add_case("unsqueeze", "dim -1", one(normal, {2, 3}), [](const Inputs& x) { return unsqueeze(x[0], -1); });
  add_case("squeeze", "dim 1", one(normal, {2, 1, 3}), [](const Inputs& x) { return squeeze(x[0], 1); });
  add_case("squeeze", "dim -1", one(normal, {3, 1}), [](const Inputs& x) { return squeeze(x[0], -1); });
  add_case("permute", "{2, 0, 1}", one(normal, {2, 3, 4}), [](const Inputs& x) { return permute(x[0], {2, 0, 1}); });
  add_case("permute", "{0, 2, 1, 3}", one(normal, {2, 3, 2, 2}), [](const Inputs& x) {
    return permute(x[0], {0, 2, 1, 3});
  });
  add_case("transpose", "last two", one(normal, {2, 3, 4}), [](const Inputs& x) { return transpose(x[0], -1, -2); });
  add_case("transpose", "0 and 2", one(normal, {2, 3, 4}), [](const Inputs& x) { return transpose(x[0], 0, 2); });
  add_case("narrow", "dim 1 [1, 3)", one(normal, {2, 4, 3}), [](const Inputs& x) { return narrow(x[0], 1, 1, 2); });
  add_case("narrow", "dim 0 [2, 3)", one(normal, {4, 2}), [](const Inputs& x) { return narrow(x[0], 0, 2, 1); });
  add_case("slice", "dim -1 [-3, -1)", one(normal, {2, 5}), [](const Inputs& x) { return slice(x[0], -1, -3, -1); });
  add_case("slice", "dim 0 [1, 99) clamped", one(normal, {3, 2}),
           [](const Inputs& x) { return slice(x[0], 0, 1, 99); });
  add_case(
      "concat", "three along dim 1",
      [](Generator& g) {
        return Inputs{normal(g, {2, 1, 3}), normal(g, {2, 2, 3}), normal(g, {2, 3, 3})};
      },
      [](const Inputs& x) { return concat(x, 1); });
  add_case("concat", "two along dim 0", pair(normal, {1, 3}, normal, {2, 3}),
           [](const Inputs& x) { return concat(x, 0); });
  add_case("patchify", "[2, 1, 4, 6] in 2x2 patches", one(normal, {2, 1, 4, 6}),
           [](const Inputs& x) { return patchify(x[0], 2); });
  add_case("patchify", "[1, 3, 3, 3] in one 3x3 patch, channels first", one(normal, {1, 3, 3, 3}),
           [](const Inputs& x) { return patchify(x[0], 3); });
  add_case("masked_mean", "[3, 4, 2] over lengths 4, 1, 2", one(normal, {3, 4, 2}), [](const Inputs& x) {
    return masked_mean(x[0], indices({4, 1, 2}, {3}).to(x[0].device()));
  });
  add_case("masked_mean", "[2, 3] over lengths 3, 2", one(normal, {2, 3}), [](const Inputs& x) {
    return masked_mean(x[0], indices({3, 2}, {2}).to(x[0].device()));
  });
  add_case("stack", "dim 0", pair(normal, {2, 3}, normal, {2, 3}), [](const Inputs& x) { return stack(x, 0); });
  add_case("stack", "dim -1", pair(normal, {2, 3}, normal, {2, 3}), [](const Inputs& x) { return stack(x, -1); });
  add_case("expand", "[3, 1] to [2, 3, 4]", one(normal, {3, 1}), [](const Inputs& x) {
    return expand(x[0], {2, 3, 4});
  });
  add_case("expand", "[1, 2] to [3, -1]", one(normal, {1, 2}), [](const Inputs& x) { return expand(x[0], {3, -1}); });
}

// Shape ops driven by an index or a mask tensor.
void add_indexed_cases(const CaseAdder& add_case) {
  add_case(
      "index_select", "dim 0, repeated rows",
      [](Generator& g) {
        return Inputs{normal(g, {4, 3}), indices({2, 0, 2, 3, 2}, {5})};
      },
      [](const Inputs& x) { return index_select(x[0], 0, x[1]); });
  add_case(
      "index_select", "dim 1",
      [](Generator& g) {
        return Inputs{normal(g, {2, 4, 3}), indices({3, 1, 1}, {3})};
      },
      [](const Inputs& x) { return index_select(x[0], 1, x[1]); });
  add_case(
      "gather", "dim 1, repeats",
      [](Generator& g) {
        return Inputs{normal(g, {3, 4}), indices({0, 3, 3, 1, 2, 2, 0, 0, 1}, {3, 3})};
      },
      [](const Inputs& x) { return gather(x[0], 1, x[1]); });
  add_case(
      "gather", "dim 0, smaller index",
      [](Generator& g) {
        return Inputs{normal(g, {3, 4, 2}), indices({2, 0, 1, 1, 0, 2}, {2, 3, 1})};
      },
      [](const Inputs& x) { return gather(x[0], 0, x[1]); });
  add_case(
      "masked_fill", "broadcast mask [1, 4]",
      [](Generator& g) {
        return Inputs{normal(g, {3, 4}), bools({true, false, false, true}, {1, 4})};
      },
      [](const Inputs& x) { return masked_fill(x[0], x[1], -2.0); });
  add_case(
      "masked_fill", "x broadcast by the mask",
      [](Generator& g) {
        return Inputs{normal(g, {1, 3}), bools({true, false, false, false, true, false}, {2, 3})};
      },
      [](const Inputs& x) { return masked_fill(x[0], x[1], 0.5); });
  add_case(
      "where", "same shapes",
      [](Generator& g) {
        return Inputs{bools({true, false, true, true, false, false}, {2, 3}), normal(g, {2, 3}), normal(g, {2, 3})};
      },
      [](const Inputs& x) { return where(x[0], x[1], x[2]); });
  add_case(
      "where", "all broadcast",
      [](Generator& g) {
        return Inputs{bools({true, false, true}, {3, 1}), normal(g, {4}), normal(g, {3, 1})};
      },
      [](const Inputs& x) { return where(x[0], x[1], x[2]); });
}

// Matrix products: matmul in every transpose and batch layout, and linear.
void add_matmul_cases(const CaseAdder& add_case) {
  struct Mm {
    const char* label;
    Shape a, b;
    bool ta, tb;
  };
  for (Mm m : {Mm{"[3, 4] @ [4, 5]", {3, 4}, {4, 5}, false, false}, Mm{"[4, 3]ᵀ @ [4, 5]", {4, 3}, {4, 5}, true, false},
               Mm{"[3, 4] @ [5, 4]ᵀ", {3, 4}, {5, 4}, false, true}, Mm{"[4, 3]ᵀ @ [5, 4]ᵀ", {4, 3}, {5, 4}, true, true},
               Mm{"batched [2, 3, 4] @ [2, 4, 2]", {2, 3, 4}, {2, 4, 2}, false, false},
               Mm{"broadcast batch [2, 1, 3, 4] @ [3, 2, 4]ᵀ", {2, 1, 3, 4}, {3, 2, 4}, false, true},
               Mm{"folded rows [2, 3, 4] @ [5, 4]ᵀ", {2, 3, 4}, {5, 4}, false, true},
               Mm{"[3, 4] @ batched [2, 4, 2]", {3, 4}, {2, 4, 2}, false, false},
               Mm{"batched [2, 4, 3]ᵀ @ [4, 2]", {2, 4, 3}, {4, 2}, true, false}}) {
    add_case("matmul", m.label, pair(normal, m.a, normal, m.b),
             [ta = m.ta, tb = m.tb](const Inputs& x) { return matmul(x[0], x[1], ta, tb); });
  }

  // ---- linear: x·Wᵀ + b ----
  auto linear_case = [&](const char* label, Shape xs, int64_t out, bool bias) {
    add_case(
        "linear", label,
        [=](Generator& g) {
          Inputs in{normal(g, xs), normal(g, {out, xs.back()})};
          if (bias) in.push_back(normal(g, {out}));
          return in;
        },
        [](const Inputs& x) { return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor()); });
  };
  linear_case("[3, 4] -> 5 with bias", {3, 4}, 5, true);
  linear_case("[2, 3, 4] -> 2 with bias (rows folded)", {2, 3, 4}, 2, true);
  linear_case("[4] -> 3 without bias", {4}, 3, false);
}

// Fused attention: q [B, n_q, H, d], k [B, n_k, H, d], v [B, n_k, H, d_v].
void add_fused_attention_cases(const CaseAdder& add_case) {
  auto attention_case = [&](const char* label, Shape qs, Shape ks, int64_t dv, std::function<AttentionMasks()> masks) {
    Shape vs = ks;
    vs.back() = dv;
    add_case(
        "fused_attention", label,
        [=](Generator& g) {
          return Inputs{normal(g, qs), normal(g, ks), normal(g, vs)};
        },
        [masks, d = qs.back()](const Inputs& x) {
          return fused_attention(x[0], x[1], x[2], masks().to(x[0].device()), 1.0 / std::sqrt(static_cast<double>(d)));
        });
  };
  attention_case("causal self, B=2 n=5 H=2", {2, 5, 2, 3}, {2, 5, 2, 3}, 3, [] {
    return AttentionMasks{{}, {}, true};
  });
  attention_case("cross n_q=4 n_k=6 d_v=2, key padding, one sequence fully padded", {2, 4, 2, 3}, {2, 6, 2, 3}, 2, [] {
    return AttentionMasks{
        {}, bools({true, true, true, false, false, false, false, false, false, false, false, false}, {2, 6}), false};
  });
  attention_case("bool [n_q, n_k] mask with a fully masked row, plus causal", {1, 3, 2, 2}, {1, 4, 2, 2}, 2, [] {
    return AttentionMasks{
        bools({true, false, true, true, false, false, false, false, true, true, false, true}, {3, 4}), {}, true};
  });
  attention_case("float mask [B, 1, n_q, n_k] with -inf entries", {2, 3, 1, 2}, {2, 3, 1, 2}, 2, [] {
    double inf = std::numeric_limits<double>::infinity();
    return AttentionMasks{Tensor::from_vector(std::vector<double>{0.5, -inf, 0, 0, -1, 2, -inf, -inf, -inf, 1, 0, 0,
                                                                  0.25, 0, -inf, 0, 0, 0},
                                              {2, 1, 3, 3}),
                          {},
                          false};
  });
  attention_case("causal n=130: several query and key blocks, blocks above the diagonal skipped", {1, 130, 1, 2},
                 {1, 130, 1, 2}, 2, [] {
                   return AttentionMasks{{}, {}, true};
                 });

  attention_case("sliding window 3, causal, n=9, float mask with a fully masked row", {1, 9, 2, 2}, {1, 9, 2, 2}, 2,
                 [] {
                   std::vector<double> m(81, 0.0);
                   for (int64_t j = 0; j < 9; ++j) m[4 * 9 + j] = -std::numeric_limits<double>::infinity();
                   return AttentionMasks{Tensor::from_vector(m, {9, 9}), {}, true, 3};
                 });
  attention_case("sliding window 2 on each side, n=70, key padding", {2, 70, 1, 2}, {2, 70, 1, 2}, 2, [] {
    std::vector<bool> keep(140, true);
    for (int64_t j = 100; j < 140; ++j) keep[j] = false;
    return AttentionMasks{{}, Tensor::from_vector(keep, {2, 70}), false, 2};
  });
}

void add_linear_attention_cases(const CaseAdder& add_case) {
  auto linear_attention_case = [&](const char* label, Shape s, bool causal, Tensor padding) {
    add_case(
        "linear_attention", label,
        [=](Generator& g) {
          return Inputs{normal(g, s), normal(g, s), normal(g, s)};
        },
        [causal, padding](const Inputs& x) {
          return linear_attention(x[0], x[1], x[2], causal, padding.defined() ? padding.to(x[0].device()) : padding);
        });
  };
  linear_attention_case("causal [2, 6, 2, 3]", {2, 6, 2, 3}, true, Tensor());
  linear_attention_case("not causal, key padding, one sequence fully padded", {2, 5, 1, 3}, false,
                        bools({true, true, false, true, false, false, false, false, false, false}, {2, 5}));
  linear_attention_case("causal with key padding", {1, 7, 2, 2}, true,
                        bools({true, false, true, true, false, true, true}, {1, 7}));
  // n = 130: three chunks of the device kernels' scan (64 rows each), the last one short.
  std::vector<bool> keep130(130, true);
  for (int64_t j = 0; j < 130; j += 7) keep130[j] = false;
  for (int64_t j = 60; j < 70; ++j) keep130[j] = false;  // a run across the first chunk's end
  linear_attention_case("causal n=130, key padding: three chunks of the device scan", {1, 130, 1, 2}, true,
                        Tensor::from_vector(keep130, {1, 130}));
  linear_attention_case("not causal n=130, two heads", {1, 130, 2, 2}, false, Tensor());
}

// Self-attention with q, k and v packed in one tensor.
void add_packed_attention_cases(const CaseAdder& add_case) {
  auto packed_case = [&](const char* label, Shape s, std::function<AttentionMasks()> masks) {
    add_case(
        "fused_self_attention", label, [=](Generator& g) { return Inputs{normal(g, s)}; },
        [masks, d = s.back()](const Inputs& x) {
          return fused_self_attention(x[0], masks().to(x[0].device()), 1.0 / std::sqrt(static_cast<double>(d)));
        });
  };
  packed_case("packed [2, 5, 3, 2, 3], causal", {2, 5, 3, 2, 3}, [] { return AttentionMasks{{}, {}, true}; });
  packed_case("packed, key padding with one sequence fully padded, n=70", {2, 70, 3, 1, 2}, [] {
    std::vector<bool> keep(140, false);
    for (int64_t j = 0; j < 33; ++j) keep[j] = true;
    return AttentionMasks{{}, Tensor::from_vector(keep, {2, 70}), false};
  });
}

// Recompute (activation checkpointing): a segment replayed in backward.
void add_recompute_cases(const CaseAdder& add_case) {
  add_case("recompute", "tanh(a·b) + a, replayed in backward", pair(normal, {3, 4}, normal, {4}),
           [](const Inputs& x) { return recompute([](const Inputs& in) { return tanh(in[0] * in[1]) + in[0]; }, x); });
  add_case("recompute", "nested: a segment inside a segment", pair(normal, {2, 3}, normal, {3, 2}),
           [](const Inputs& x) {
             return recompute(
                 [](const Inputs& in) {
                   Tensor h = recompute([](const Inputs& inner) { return exp(matmul(inner[0], inner[1]) * 0.3); }, in);
                   return softmax(h, -1);
                 },
                 x);
           });
}

void add_softmax_cases(const CaseAdder& add_case) {
  add_case("softmax", "last dim", one(normal, {3, 5}), [](const Inputs& x) { return softmax(x[0], -1); });
  add_case("softmax", "dim 1 of [2, 3, 4]", one(normal, {2, 3, 4}), [](const Inputs& x) { return softmax(x[0], 1); });
  add_case(
      "softmax", "masked with -inf, one row fully masked",
      [](Generator& g) {
        return Inputs{normal(g, {3, 4}),
                      bools({false, true, false, false, true, true, true, true, false, false, false, true}, {3, 4})};
      },
      [](const Inputs& x) { return softmax(masked_fill(x[0], x[1], -std::numeric_limits<double>::infinity()), -1); });
  add_case("log_softmax", "last dim", one(normal, {3, 5}), [](const Inputs& x) { return log_softmax(x[0], -1); });
  add_case("log_softmax", "dim 0 of [3, 2, 2]", one(normal, {3, 2, 2}),
           [](const Inputs& x) { return log_softmax(x[0], 0); });
  // Rows longer than a device's 32 lanes, in two blocks of rows.
  add_case("softmax", "last dim of 70, 11 rows", one(normal, {11, 70}),
           [](const Inputs& x) { return softmax(x[0], -1); });
  add_case("log_softmax", "last dim of 40, 10 rows", one(normal, {10, 40}),
           [](const Inputs& x) { return log_softmax(x[0], -1); });
}

std::vector<GradcheckCase> builtin_cases() {
  std::vector<GradcheckCase> cases;
  CaseAdder add_case{cases};
  add_arithmetic_cases(add_case);
  add_unary_cases(add_case);
  add_device_transfer_cases(add_case);
  add_reduction_cases(add_case);
  add_shape_cases(add_case);
  add_indexed_cases(add_case);
  add_matmul_cases(add_case);
  add_fused_attention_cases(add_case);
  add_linear_attention_cases(add_case);
  add_packed_attention_cases(add_case);
  add_recompute_cases(add_case);
  add_softmax_cases(add_case);
  return cases;
}

}  // namespace

std::vector<GradcheckCase>& gradcheck_registry() {
  static std::vector<GradcheckCase> cases = builtin_cases();
  return cases;
}

void register_gradcheck_case(GradcheckCase c) { gradcheck_registry().push_back(std::move(c)); }

}  // namespace qkv
