// Sliding-window and linear attention against their plain references:
// window ≥ n equals full attention, a window equals full attention under a
// band mask, and linear attention equals its quadratic form, all in float64,
// gradients included.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/ops/attention.h"
#include "compare.h"
#include "nn/nn.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::worst_difference;

namespace {

struct Leaves {
  Tensor q, k, v, g;
};

Leaves leaves(int64_t B, int64_t n, int64_t H, int64_t d, uint64_t seed) {
  Generator gen(seed);
  auto leaf = [&](Shape s) { return Tensor::randn(s, DType::Float64, &gen).requires_grad_(); };
  Leaves l{leaf({B, n, H, d}), leaf({B, n, H, d}), leaf({B, n, H, d}), Tensor()};
  l.g = Tensor::randn({B, n, H, d}, DType::Float64, &gen);
  return l;
}

// Output and the three input gradients of f, for the upstream gradient l.g.
std::vector<Tensor> run(Leaves& l, const std::function<Tensor()>& f) {
  for (Tensor* t : {&l.q, &l.k, &l.v}) t->zero_grad();
  Tensor out = f();
  out.backward(l.g);
  return {out.detach(), l.q.grad(), l.k.grad(), l.v.grad()};
}

void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol) {
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(names[i]);
    REQUIRE(a[i].shape() == b[i].shape());
    CHECK(worst_difference(a[i], b[i]) <= tol);
  }
}

// φ(x) = elu(x) + 1, composed from differentiable ops.
Tensor phi(const Tensor& x) { return where(less(x, 0.0), exp(x), x + 1.0); }

// The quadratic form of linear attention: out_i = Σ_j (Q_i·K_j) v_j / (Σ_j Q_i·K_j + eps), j over the allowed keys.
Tensor quadratic_linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                  const Tensor& padding) {
  auto heads = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };  // [B, H, n, d]
  Tensor a = matmul(phi(heads(q)), phi(heads(k)), false, true);           // [B, H, n, n]
  int64_t n = q.size(1);
  Tensor allowed = causal ? causal_mask(n, n) : Tensor::ones({n, n}, DType::Bool);
  if (padding.defined()) allowed = logical_and(allowed, reshape(padding, {padding.size(0), 1, 1, n}));
  a = masked_fill(a, logical_not(allowed), 0.0);
  Tensor out = div(matmul(a, heads(v)), sum(a, {-1}, true) + 1e-6);
  return heads(out);
}

}  // namespace

TEST_CASE("sliding-window attention with a window of at least n equals full attention to 1e-12",
          "[attention][window]") {
  for (bool causal : {true, false}) {
    INFO((causal ? "causal" : "both sides"));
    Leaves l = leaves(2, 70, 2, 3, 1);
    auto full = run(l, [&] { return fused_attention(l.q, l.k, l.v, {{}, {}, causal}, 0.5); });
    for (int64_t w : {70, 69, 500}) {
      INFO("window " << w);
      check_same(run(l, [&] { return fused_attention(l.q, l.k, l.v, {{}, {}, causal, w}, 0.5); }), full, 1e-12);
    }
  }
}

TEST_CASE("sliding-window attention equals full attention under the band mask, padding and block edges included",
          "[attention][window]") {
  Tensor padding = key_padding_mask({600, 3}, 600);
  for (bool causal : {true, false})
    for (int64_t w : {1, 5, 64, 130}) {
      INFO((causal ? "causal" : "both sides") << ", window " << w);
      Leaves l = leaves(2, 600, 1, 2, 2);
      auto banded = run(l, [&] {
        return fused_attention(l.q, l.k, l.v, {window_mask(600, 600, w, causal), padding, causal}, 0.7);
      });
      check_same(run(l, [&] { return fused_attention(l.q, l.k, l.v, {{}, padding, causal, w}, 0.7); }), banded, 1e-12);
    }
}

TEST_CASE("window_mask is the band", "[attention][window]") {
  Tensor m = window_mask(4, 4, 1, true);
  CHECK(m.to_vector() == std::vector<double>{1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1});
  m = window_mask(3, 3, 1, false);
  CHECK(m.to_vector() == std::vector<double>{1, 1, 0, 1, 1, 1, 0, 1, 1});
  CHECK_THROWS_AS(window_mask(3, 3, -1, false), Error);
  Tensor q = Tensor::randn({1, 3, 1, 2});
  CHECK_THROWS_AS(fused_attention(q, q, q, {{}, {}, true, -2}, 1), Error);
}

TEST_CASE("linear attention equals its quadratic form to 1e-10, gradients included", "[attention][linear]") {
  Tensor padding = Tensor::from_vector(std::vector<bool>{true, true, false, true, true, true, true, true, true, false,
                                                         false, false, false, false, false, false, false, false},
                                       {2, 9});
  for (bool causal : {true, false})
    for (bool padded : {false, true}) {
      INFO((causal ? "causal" : "not causal") << (padded ? ", padded (one sequence entirely)" : ""));
      Leaves l = leaves(2, 9, 2, 3, 5);
      Tensor p = padded ? padding : Tensor();
      auto reference = run(l, [&] { return quadratic_linear_attention(l.q, l.k, l.v, causal, p); });
      check_same(run(l, [&] { return linear_attention(l.q, l.k, l.v, causal, p); }), reference, 1e-10);
    }
}

TEST_CASE("linear attention rejects inputs that do not fit", "[attention][linear][errors]") {
  Tensor q = Tensor::randn({1, 4, 2, 3}), v = Tensor::randn({1, 4, 2, 5});
  CHECK_NOTHROW(linear_attention(q, q, v, true));
  CHECK_THROWS_AS(linear_attention(q, Tensor::randn({1, 5, 2, 3}), v, true), Error);
  CHECK_THROWS_AS(linear_attention(q, q, Tensor::randn({1, 4, 3, 5}), true), Error);
  CHECK_THROWS_AS(linear_attention(q, q, v, true, Tensor::ones({1, 3}, DType::Bool)), Error);
  CHECK_THROWS_AS(linear_attention(q, q, v, true, Tensor(), 0.0), Error);
}

TEST_CASE("AttentionMasks: one set of position rules for the dense masks, the kernel's block bounds and an offset") {
  for (bool causal : {false, true})
    for (int64_t window : {0, 1, 3})
      for (int64_t offset : {0, 2, 5}) {
        if (offset > 0 && !causal) continue;  // an offset is for decoding after cached keys, which is causal
        AttentionMasks masks;
        masks.causal = causal, masks.window = window, masks.query_offset = offset;
        const PositionRules rules = masks.rules();
        const int64_t nq = 6, nk = 6 + offset;
        INFO("causal " << causal << " window " << window << " offset " << offset);
        Tensor dense = masks.position_mask(nq, nk);
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = 0; j < nk; ++j) {
            int64_t p = i + offset;  // the query's position among the keys
            bool want = (!causal || j <= p) && (window == 0 || (j >= p - window && (causal || j <= p + window)));
            CHECK(rules.sees(i, j) == want);
            if (dense.defined()) CHECK(dense.data<bool>()[i * nk + j] == want);
            // The block bounds never cut off a key the rules let a query see.
            if (want) CHECK((j >= rules.first_key(i) && j < rules.end_key(i + 1, nk)));
            if (want) CHECK((i >= rules.first_query(j) && i < rules.end_query(j + 1, nq)));
          }
        if (!causal && window == 0) CHECK_FALSE(dense.defined());
        // The kernel with the rules equals the kernel with their dense mask.
        Generator gen(5);
        Tensor q = Tensor::randn({2, nq, 2, 4}, DType::Float64, &gen),
               k = Tensor::randn({2, nk, 2, 4}, DType::Float64, &gen),
               v = Tensor::randn({2, nk, 2, 3}, DType::Float64, &gen);
        AttentionMasks as_mask;
        as_mask.mask = dense;
        CHECK(testing::worst_difference(fused_attention(q, k, v, masks, 0.5), fused_attention(q, k, v, as_mask, 0.5)) <
              1e-14);
      }
}
