// qkv's own float32 product (autograd/ops/sgemm.h) against a float64 triple
// loop, and its promise: the same bits for any thread count, and for AVX2 and
// AVX-512 alike.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops/sgemm.h"
#include "autograd/simd.h"

using namespace qkv;

namespace {

struct Product {
  bool ta, tb;
  int64_t n, m, k;
  float alpha, beta;
  int64_t pad;  // extra elements in every leading dimension
};

// Shapes around the kernel's edges: tiles of 12 (or 6) rows and 32 (or 16) columns, k-blocks of 512,
// packed blocks of 1536 rows and 2048 columns.
const Product kProducts[] = {
    {false, false, 37, 45, 70, 1, 0, 0},   {false, true, 100, 33, 257, 1, 0, 3},
    {true, false, 13, 64, 1100, 1, 1, 0},  {true, true, 25, 31, 513, 0.125f, 0.5f, 5},
    {false, true, 3100, 40, 9, 1, 0, 0},   {true, false, 7, 4200, 12, 1, 1, 1},
    {false, false, 12, 32, 512, -2, 0, 0}, {true, true, 2, 3, 1, 1, 0, 2},
};

struct Operands {
  std::vector<float> a, b, c;
  int64_t lda, ldb, ldc;
};

Operands make(const Product& p, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  Operands o;
  o.lda = (p.ta ? p.n : p.k) + p.pad, o.ldb = (p.tb ? p.k : p.m) + p.pad, o.ldc = p.m + p.pad;
  o.a.resize((p.ta ? p.k : p.n) * o.lda), o.b.resize((p.tb ? p.m : p.k) * o.ldb), o.c.resize(p.n * o.ldc);
  for (auto* v : {&o.a, &o.b, &o.c})
    for (float& x : *v) x = normal(gen);
  return o;
}

std::vector<float> run(const Product& p, Operands o, int threads) {
  REQUIRE(packed_sgemm(p.ta, p.tb, p.n, p.m, p.k, o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(), o.ldc, p.beta,
                       p.alpha, threads));
  return o.c;
}

bool has_kernel() { return simd::gemm_kernel().mr > 0; }

}  // namespace

TEST_CASE("sgemm: every element within float32's bound of a float64 triple loop, C's padding untouched", "[matmul]") {
  if (!has_kernel()) {
    WARN("this CPU's vector level has no micro-kernel (SSE2): BLAS computes every product");
    return;
  }
  for (const Product& p : kProducts) {
    INFO((p.ta ? "Aᵀ" : "A") << (p.tb ? " Bᵀ" : " B") << " n=" << p.n << " m=" << p.m << " k=" << p.k);
    Operands o = make(p, 1);
    std::vector<float> c = run(p, o, 2);
    auto A = [&](int64_t i, int64_t t) { return double(p.ta ? o.a[t * o.lda + i] : o.a[i * o.lda + t]); };
    auto B = [&](int64_t t, int64_t j) { return double(p.tb ? o.b[j * o.ldb + t] : o.b[t * o.ldb + j]); };
    double worst = 0;  // error over its bound: γ(k + 2) · (|alpha| Σ|a||b| + |beta c|)
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t j = 0; j < p.m; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t t = 0; t < p.k; ++t) {
          sum += A(i, t) * B(t, j);
          magnitude += std::fabs(A(i, t) * B(t, j));
        }
        double c0 = o.c[i * o.ldc + j];
        double want = p.alpha * sum + (p.beta != 0 ? p.beta * c0 : 0.0);
        double bound = (p.k + 2) * std::ldexp(1.0, -24) * (std::fabs(p.alpha) * magnitude + std::fabs(p.beta * c0));
        worst = std::max(worst, std::fabs(c[i * o.ldc + j] - want) / bound);
      }
    CHECK(worst <= 1.0);
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t j = p.m; j < o.ldc; ++j) REQUIRE(c[i * o.ldc + j] == o.c[i * o.ldc + j]);
  }
}

TEST_CASE("sgemm: the same bits for 1, 2, 3, 5 and 16 threads", "[matmul][threads]") {
  if (!has_kernel()) {
    WARN("this CPU's vector level has no micro-kernel (SSE2)");
    return;
  }
  for (const Product& p : kProducts) {
    INFO("n=" << p.n << " m=" << p.m << " k=" << p.k);
    Operands o = make(p, 2);
    std::vector<float> one = run(p, o, 1);
    for (int threads : {2, 3, 5, 16}) {
      INFO(threads << " threads");
      bool same = run(p, o, threads) == one;  // a bool: Catch would print every value of a vector
      CHECK(same);
    }
  }
}

TEST_CASE("sgemm: beta = 0 never reads C, so NaN left in it does not spread", "[matmul]") {
  if (!has_kernel()) {
    WARN("this CPU's vector level has no micro-kernel (SSE2)");
    return;
  }
  Product p{false, true, 30, 50, 40, 1, 0, 0};
  Operands o = make(p, 3);
  std::fill(o.c.begin(), o.c.end(), std::numeric_limits<float>::quiet_NaN());
  for (float x : run(p, o, 2)) REQUIRE(std::isfinite(x));
}

TEST_CASE("sgemm: a bias row gives the bits of copying it into C and taking beta = 1, for any thread count",
          "[matmul][threads]") {
  if (!has_kernel()) {
    WARN("this CPU's vector level has no micro-kernel (SSE2)");
    return;
  }
  for (Product p : kProducts) {
    INFO("n=" << p.n << " m=" << p.m << " k=" << p.k);
    Operands o = make(p, 5);
    std::vector<float> bias(o.c.begin(), o.c.begin() + p.m);  // C's first row: any values
    Operands copied = o;
    for (int64_t i = 0; i < p.n; ++i) std::copy(bias.begin(), bias.end(), copied.c.begin() + i * o.ldc);
    p.beta = 1;
    const std::vector<float> want = run(p, copied, 1);
    p.beta = 0;
    for (int threads : {1, 2, 5}) {
      INFO(threads << " threads");
      Operands biased = o;  // C holds other values: beta = 0 with a bias must not read them
      REQUIRE(packed_sgemm(p.ta, p.tb, p.n, p.m, p.k, biased.a.data(), biased.lda, biased.b.data(), biased.ldb,
                           biased.c.data(), biased.ldc, 0.0f, p.alpha, threads, bias.data()));
      bool same = biased.c == want;  // padding past m untouched in both
      CHECK(same);
    }
    CHECK_FALSE(packed_sgemm(p.ta, p.tb, p.n, p.m, p.k, o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(), o.ldc, 0.5f,
                             p.alpha, 2, bias.data()));  // a bias replaces beta·C: both at once is refused
  }
}

TEST_CASE("sgemm: row sums of a transposed A are its stored columns added row by row, for any thread count",
          "[matmul][threads]") {
  if (!has_kernel()) {
    WARN("this CPU's vector level has no micro-kernel (SSE2)");
    return;
  }
  // The transposed products of the edge list, and one past a block of rows (1536) and split by columns.
  std::vector<Product> products{{true, false, 1700, 40, 30, 1, 0, 2}, {true, false, 24, 256, 700, 1, 0, 0}};
  for (const Product& p : kProducts)
    if (p.ta) products.push_back(p);
  for (const Product& p : products) {
    INFO("n=" << p.n << " m=" << p.m << " k=" << p.k);
    Operands o = make(p, 7);
    std::vector<float> want(p.n, 0.0f);  // one row of the stored A at a time, in order
    for (int64_t t = 0; t < p.k; ++t)
      for (int64_t i = 0; i < p.n; ++i) want[i] += o.a[t * o.lda + i];
    const std::vector<float> plain = run(p, o, 1);
    for (int threads : {1, 2, 3, 5, 16}) {
      INFO(threads << " threads");
      Operands s = o;
      std::vector<float> sums(p.n, NAN);  // every element written
      REQUIRE(packed_sgemm(p.ta, p.tb, p.n, p.m, p.k, s.a.data(), s.lda, s.b.data(), s.ldb, s.c.data(), s.ldc, p.beta,
                           p.alpha, threads, nullptr, sums.data()));
      bool same_sums = sums == want, same_product = s.c == plain;
      CHECK(same_sums);
      CHECK(same_product);
    }
  }
  Product p{false, false, 20, 20, 20, 1, 0, 0};  // an untransposed A: refused, nothing computed
  Operands o = make(p, 8);
  std::vector<float> sums(20);
  CHECK_FALSE(packed_sgemm(p.ta, p.tb, p.n, p.m, p.k, o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(), o.ldc, 0.0f,
                           1.0f, 2, nullptr, sums.data()));
}

// Packing a stored [n, k] A or [m, k] B transposes it in registers (autograd/simd/transpose.h); packing
// a stored [k, n] A or [k, m] B is a copy. The tile's arithmetic is the same either way, so every layout of
// the same matrices must give the bits of Aᵀ·B, the layout packed by copies alone: the transposes'
// reference, at every vector level.
TEST_CASE("sgemm: each layout of the same operands gives the same bits, at every vector level", "[matmul][simd]") {
  const simd::Isa original = simd::active_isa();
  int levels = 0;
  for (simd::Isa isa : simd::available_isas()) {
    simd::force_isa(isa);
    if (!has_kernel()) continue;
    ++levels;
    for (const Product& p : kProducts) {
      INFO(simd::isa_name(isa) << " n=" << p.n << " m=" << p.m << " k=" << p.k << " pad " << p.pad);
      Operands o = make(p, 6);
      // The logical operands op(A)[n, k] and op(B)[k, m], stored either way round.
      auto A = [&](int64_t i, int64_t t) { return p.ta ? o.a[t * o.lda + i] : o.a[i * o.lda + t]; };
      auto B = [&](int64_t t, int64_t j) { return p.tb ? o.b[j * o.ldb + t] : o.b[t * o.ldb + j]; };
      auto layout = [&](bool ta, bool tb, int threads) {
        Product q = p;
        q.ta = ta, q.tb = tb;
        Operands s = o;
        s.lda = (ta ? p.n : p.k) + p.pad, s.ldb = (tb ? p.k : p.m) + p.pad;
        s.a.assign((ta ? p.k : p.n) * s.lda, NAN), s.b.assign((tb ? p.m : p.k) * s.ldb, NAN);  // NaN padding
        for (int64_t i = 0; i < p.n; ++i)
          for (int64_t t = 0; t < p.k; ++t) (ta ? s.a[t * s.lda + i] : s.a[i * s.lda + t]) = A(i, t);
        for (int64_t t = 0; t < p.k; ++t)
          for (int64_t j = 0; j < p.m; ++j) (tb ? s.b[j * s.ldb + t] : s.b[t * s.ldb + j]) = B(t, j);
        return run(q, s, threads);
      };
      const std::vector<float> copies = layout(true, false, 1);
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (int threads : {2, 5}) {  // 5: packed together by the team (autograd/ops/sgemm.cpp)
            INFO((ta ? "Aᵀ" : "A") << (tb ? " Bᵀ" : " B") << ", " << threads << " threads, against Aᵀ B");
            bool same = layout(ta, tb, threads) == copies;
            CHECK(same);
          }
    }
  }
  simd::force_isa(original);
  if (levels == 0) WARN("this CPU's vector level has no micro-kernel (SSE2): BLAS computes every product");
}

TEST_CASE("sgemm: AVX2 and AVX-512 give the same bits, SSE2 leaves the product to BLAS, NEON computes it",
          "[matmul][simd]") {
  const simd::Isa original = simd::active_isa();
  std::vector<simd::Isa> isas = simd::available_isas();
  std::vector<std::vector<float>> results;
  for (simd::Isa isa : isas) {
    simd::force_isa(isa);
    Product p{true, false, 70, 90, 600, 1, 0.5f, 1};
    Operands o = make(p, 4);
    bool computed = packed_sgemm(p.ta, p.tb, p.n, p.m, p.k, o.a.data(), o.lda, o.b.data(), o.ldb, o.c.data(), o.ldc,
                                 p.beta, p.alpha, 2);
    CHECK(computed == (isa != simd::Isa::SSE2));
    if (computed) results.push_back(o.c);
  }
  simd::force_isa(original);
  for (size_t i = 1; i < results.size(); ++i) {
    bool same = results[i] == results[0];
    CHECK(same);
  }
  if (results.size() < 2) WARN("only one level with a micro-kernel on this CPU: nothing to compare");
}

TEST_CASE("matmul through the own kernel: the same bits for 1, 2 and 16 threads, within bounds of float64",
          "[matmul][threads]") {
  Tensor a = Tensor::randn({4, 96, 200}), b = Tensor::randn({200, 130});
  std::vector<Tensor> results;
  for (int threads : {1, 2, 16}) {
    set_num_threads(threads);
    results.push_back(matmul(a, b));
  }
  set_num_threads(0);
  bool same_at_2 = results[1].to_vector() == results[0].to_vector();
  bool same_at_16 = results[2].to_vector() == results[0].to_vector();
  CHECK(same_at_2);
  CHECK(same_at_16);
  Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
  std::vector<double> want = matmul(a64, b64).to_vector(), magnitude = matmul(abs(a64), abs(b64)).to_vector();
  std::vector<double> got = results[0].to_vector();
  double worst = 0;  // error over its bound γ(k + 2)·Σ|a||b|
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / (202 * std::ldexp(1.0, -24) * magnitude[i]));
  CHECK(worst <= 1.0);
}
