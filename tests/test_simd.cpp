// The vectorised float32 kernels against double, under every instruction set
// this CPU and build offer (so the AVX2 path is tested even on an AVX-512
// machine). Elementwise functions: worst error in ULPs over a dense sweep.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "autograd/simd.h"

using namespace qkv;

namespace {

// The spacing of floats at |r| (the smallest normal spacing below FLT_MIN).
double ulp_at(double r) {
  float f = static_cast<float>(std::fabs(r));
  if (f < std::numeric_limits<float>::min()) f = std::numeric_limits<float>::min();
  if (std::isinf(f)) f = std::numeric_limits<float>::max();
  return std::nextafter(f, INFINITY) - f;
}

// Every k-th float in [lo, hi] (k chosen for about `count` points).
std::vector<float> sweep(float lo, float hi, int64_t count) {
  std::vector<float> xs;
  auto bits = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};  // monotone in f
  };
  auto from = [](int64_t k) {
    int32_t i = static_cast<int32_t>(k < 0 ? INT32_MIN - k : k);
    float f;
    std::memcpy(&f, &i, 4);
    return f;
  };
  int64_t a = bits(lo), b = bits(hi), step = std::max<int64_t>(1, (b - a) / count);
  for (int64_t k = a; k <= b; k += step) xs.push_back(from(k));
  return xs;
}

struct Worst {
  double ulps = 0;
  float at = 0;
};

// Worst of |f(x) − ref(x)| / (ULPs of scale(x)) − allowance(x): how far the
// kernel is from its bound's base. scale defaults to ref itself; the
// allowance (default 0) is the function's own condition number where it has one.
Worst worst_ulps(const std::vector<float>& xs, const std::function<void(const float*, float*, int64_t)>& f,
                 const std::function<double(double)>& ref, const std::function<double(double)>& scale = nullptr,
                 const std::function<double(double)>& allowance = nullptr) {
  std::vector<float> ys(xs.size());
  f(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    double r = ref(xs[i]);
    double e = std::fabs(static_cast<double>(ys[i]) - r) / ulp_at(scale ? scale(xs[i]) : r);
    if (allowance) e -= allowance(xs[i]);
    if (!(e <= w.ulps)) w = {e, xs[i]};  // NaN counts as worst
  }
  return w;
}

// |x·h'(x)/h(x)|: how many ULPs of h's value one ULP of x moves it. Any float32
// evaluation of h from a rounded intermediate of x's size can be this far off.
double condition(const std::function<double(double)>& h, double x) {
  double step = 1e-6 * std::max(std::fabs(x), 1e-3);
  double d = (h(x + step) - h(x - step)) / (2 * step);
  return std::fabs(x * d / h(x));
}

constexpr double kK = 0.7978845608028654, kC = 0.044715;
double gelu_s(double x) { return 1 / (1 + std::exp(-2 * kK * (x + kC * x * x * x))); }
double gelu_ref(double x) { return x * gelu_s(x); }
// The two terms of GELU-tanh's derivative; the kernel's error is measured in ULPs of the larger.
double gelu_d1(double x) { return gelu_s(x); }
double gelu_d2(double x) { return 0.5 * x * 4 * gelu_s(x) * (1 - gelu_s(x)) * kK * (1 + 3 * kC * x * x); }

// Runs `check` once per instruction set, restoring the default afterwards.
void for_each_isa(const std::function<void(simd::Isa)>& check) {
  simd::Isa original = simd::active_isa();
  for (simd::Isa isa : simd::available_isas()) {
    simd::force_isa(isa);
    INFO("instruction set " << simd::isa_name(isa));
    check(isa);
  }
  simd::force_isa(original);
}

}  // namespace

TEST_CASE("simd: every level this CPU has is compiled in and executed, and the best level is the default") {
  std::vector<simd::Isa> isas = simd::available_isas();
  auto has = [&](simd::Isa isa) { return std::find(isas.begin(), isas.end(), isa) != isas.end(); };
  REQUIRE(!isas.empty());
#if defined(__aarch64__)
  CHECK(isas == std::vector<simd::Isa>{simd::Isa::NEON});  // every aarch64 CPU has NEON; it is the only level
#else
  CHECK(isas.front() == simd::Isa::SSE2);
  CHECK_FALSE(has(simd::Isa::NEON));
#endif
  CHECK(simd::active_isa() == isas.back());
#if defined(__x86_64__)
  // Whatever machine built the binary: a portable build carries every level.
  __builtin_cpu_init();
  CHECK(has(simd::Isa::AVX2) == (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
  CHECK(has(simd::Isa::AVX512) ==
        (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma")));
#endif
  CHECK_THROWS_AS(simd::parse_isa("avx9"), Error);
  CHECK(simd::parse_isa("avx2") == simd::Isa::AVX2);
  CHECK(simd::parse_isa("neon") == simd::Isa::NEON);
  CHECK_THROWS_AS(simd::force_isa(has(simd::Isa::NEON) ? simd::Isa::AVX2 : simd::Isa::NEON), Error);  // the other ISA
  std::string levels;
  for (simd::Isa isa : isas) levels += std::string(" ") + simd::isa_name(isa);
  WARN("vector kernels executed by this suite:" << levels << "; default " << simd::isa_name(simd::active_isa()));
}

// AVX2 and AVX-512 run the same xsimd code with the same fused multiply-adds,
// lane for lane, so every elementwise kernel must give the same bits. An
// AVX-512 build that lost its FMAs (xsimd 8.1 has none for avx512f; see
// autograd/simd/kernels.h) gave SSE2's numbers and failed this.
TEST_CASE("simd: AVX-512 elementwise kernels give the same bits as AVX2") {
  std::vector<simd::Isa> isas = simd::available_isas();
  auto has = [&](simd::Isa isa) { return std::find(isas.begin(), isas.end(), isa) != isas.end(); };
  if (!has(simd::Isa::AVX2) || !has(simd::Isa::AVX512)) {
#if defined(__x86_64__)
    WARN("skipped: this CPU lacks AVX2 or AVX-512, so there is nothing to compare");
#else
    WARN("skipped: AVX2 and AVX-512 are x86-64's; this is not an x86-64 CPU");
#endif
    return;
  }
  std::vector<float> xs = sweep(-90.0f, 90.0f, 300001), g(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) g[i] = 0.25f + static_cast<float>(i % 97) / 31.0f;
  auto run = [&](simd::Isa isa) {
    simd::force_isa(isa);
    int64_t n = static_cast<int64_t>(xs.size());
    std::vector<std::vector<float>> out(7, std::vector<float>(xs.size()));
    simd::exp(xs.data(), out[0].data(), n);
    simd::tanh(xs.data(), out[1].data(), n);
    simd::sigmoid(xs.data(), out[2].data(), n);
    simd::gelu_tanh(xs.data(), out[3].data(), n);
    simd::gelu_tanh_backward(xs.data(), g.data(), out[4].data(), n);
    simd::exp_shifted_scaled(xs.data(), 3.5f, 0.125f, out[5].data(), n);
    simd::layer_norm_row(xs.data(), 0.5f, 1.25f, g.data(), g.data(), out[6].data(), n);
    return out;
  };
  simd::Isa original = simd::active_isa();
  auto a = run(simd::Isa::AVX2), b = run(simd::Isa::AVX512);
  simd::force_isa(original);
  const char* names[] = {"exp",           "tanh", "sigmoid", "gelu_tanh", "gelu_tanh_backward", "exp_shifted_scaled",
                         "layer_norm_row"};
  for (size_t k = 0; k < a.size(); ++k) {
    INFO(names[k]);
    CHECK(std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0);
  }
}

// Stated bounds (README): exp 1.5 ULP, tanh 1.5, sigmoid 2.5; GELU-tanh 4 ULP (5 without FMA: SSE2)
// plus its condition number (up to 170 at x = -9, where u = √(2/π)(x + 0.044715x³)
// is itself rounded); its derivative 10 ULP plus its condition number, in ULPs of its larger term (it
// crosses zero near x = -0.75, so no relative bound exists there).
TEST_CASE("simd: elementwise functions stay within their ULP bounds over a dense sweep") {
  for_each_isa([](simd::Isa isa) {
    // exp over float's whole range: finite up to ln(FLT_MAX) = 88.7228, subnormal results down to -103.97
    // (measured in ULPs of the smallest normal float's spacing, the subnormals' own).
    auto xs = sweep(-104.0f, 88.72f, 2000000);
    Worst e = worst_ulps(xs, simd::exp, [](double x) { return std::exp(x); });
    INFO("exp worst " << e.ulps << " ULP at " << e.at);
    CHECK(e.ulps <= 1.5);
    std::vector<float> edges = {88.72f, 88.73f, -103.0f, -110.0f, INFINITY, -INFINITY}, at_edges(edges.size());
    simd::exp(edges.data(), at_edges.data(), static_cast<int64_t>(edges.size()));
    CHECK(at_edges[0] == static_cast<float>(std::exp(static_cast<double>(88.72f))));  // torch: 3.3932e+38, not inf
    CHECK(at_edges[1] == INFINITY);
    CHECK(at_edges[2] > 0);  // a subnormal, not 0
    CHECK(at_edges[3] == 0);
    CHECK(at_edges[4] == INFINITY);
    CHECK(at_edges[5] == 0);

    xs = sweep(-20.0f, 20.0f, 2000000);
    Worst t = worst_ulps(xs, simd::tanh, [](double x) { return std::tanh(x); });
    INFO("tanh worst " << t.ulps << " ULP at " << t.at);
    CHECK(t.ulps <= 1.5);

    xs = sweep(-80.0f, 80.0f, 2000000);
    Worst s = worst_ulps(xs, simd::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); });
    INFO("sigmoid worst " << s.ulps << " ULP at " << s.at);
    CHECK(s.ulps <= 2.5);

    xs = sweep(-9.0f, 12.0f, 2000000);
    Worst g = worst_ulps(xs, simd::gelu_tanh, gelu_ref, nullptr, [](double x) { return condition(gelu_ref, x); });
    INFO("gelu_tanh worst " << g.ulps << " ULP beyond its condition number at " << g.at);
    CHECK(g.ulps <= (isa == simd::Isa::SSE2 ? 5.0 : 4.0));  // SSE2 has no fused multiply-add (NEON has)

    std::vector<float> ones(xs.size(), 1.0f);
    Worst d = worst_ulps(
        xs, [&](const float* x, float* y, int64_t n) { simd::gelu_tanh_backward(x, ones.data(), y, n); },
        [](double x) { return gelu_d1(x) + gelu_d2(x); },
        [](double x) { return std::max(std::fabs(gelu_d1(x)), std::fabs(gelu_d2(x))); },
        [](double x) { return std::max(condition(gelu_d1, x), condition(gelu_d2, x)); });
    INFO("gelu_tanh backward worst " << d.ulps << " ULP (of the larger term) beyond its condition number at " << d.at);
    CHECK(d.ulps <= 10.0);
    WARN(simd::isa_name(simd::active_isa())
         << ": exp " << e.ulps << ", tanh " << t.ulps << ", sigmoid " << s.ulps << " ULP; gelu_tanh " << g.ulps
         << ", gelu_tanh' " << d.ulps << " ULP beyond the condition number");
  });
}

TEST_CASE("simd: row kernels match double on random rows of every length up to 70") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for_each_isa([&](simd::Isa) {
    for (int64_t n = 1; n <= 70; ++n) {
      std::vector<float> x(n), g(n), w(n), y(n), out(n);
      for (int64_t i = 0; i < n; ++i) x[i] = normal(rng), g[i] = normal(rng), w[i] = normal(rng);
      double top = -INFINITY, total = 0, dot = 0, sum = 0;
      for (int64_t i = 0; i < n; ++i) top = std::max<double>(top, x[i]), dot += double(x[i]) * g[i], sum += x[i];
      for (int64_t i = 0; i < n; ++i) total += std::exp(double(x[i]) - top);
      CHECK(simd::max(x.data(), n) == static_cast<float>(top));
      CHECK(simd::sum(x.data(), n) == Approx(sum).margin(1e-5 * n));
      CHECK(simd::dot(x.data(), g.data(), n) == Approx(dot).margin(1e-4 * n));
      CHECK(simd::exp_shifted_sum(x.data(), static_cast<float>(top), y.data(), n) == Approx(total).epsilon(1e-6));
      // x − top is rounded to float first, as in any float32 softmax
      for (int64_t i = 0; i < n; ++i) CHECK(y[i] == Approx(std::exp(double(x[i] - float(top)))).epsilon(2e-7));

      // softmax backward: gx = y ⊙ (g − Σ g⊙y)
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::exp(double(x[i]) - top) / total);
      double gy = 0;
      for (int64_t i = 0; i < n; ++i) gy += double(g[i]) * y[i];
      simd::softmax_backward_row(y.data(), g.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) CHECK(out[i] == Approx(y[i] * (g[i] - gy)).margin(1e-5));

      // layer norm forward and backward
      double mu, rstd, rmu = sum / n, var = 0;
      for (int64_t i = 0; i < n; ++i) var += (x[i] - rmu) * (x[i] - rmu);
      double rrstd = 1 / std::sqrt(var / n + 1e-5);
      simd::row_moments(x.data(), n, 1e-5, mu, rstd);
      CHECK(mu == Approx(rmu).margin(1e-6));
      CHECK(rstd == Approx(rrstd).epsilon(1e-5));
      simd::layer_norm_row(x.data(), float(mu), float(rstd), w.data(), nullptr, out.data(), n);
      for (int64_t i = 0; i < n; ++i) CHECK(out[i] == Approx((x[i] - rmu) * rrstd * w[i]).margin(1e-5));
      double md = 0, mdx = 0;
      for (int64_t i = 0; i < n; ++i) md += double(g[i]) * w[i], mdx += double(g[i]) * w[i] * (x[i] - rmu) * rrstd;
      md /= n, mdx /= n;
      simd::layer_norm_backward_row(x.data(), g.data(), w.data(), float(mu), float(rstd), out.data(), n);
      for (int64_t i = 0; i < n; ++i)
        CHECK(out[i] ==
              Approx(rrstd * (double(g[i]) * w[i] - md - (x[i] - rmu) * rrstd * mdx)).margin(1e-4 * (1 + rrstd)));
    }
  });
}

TEST_CASE("simd: scale_by_double gives the bits of the scalar float(double(y) * s), tails and extremes included") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float extremes[] = {0.0f, -0.0f, 1e-45f, -3e-39f, 1.17549435e-38f, 3.4e38f, -3.4e38f, INFINITY, 1.0f, -1.5f};
  for_each_isa([&](simd::Isa) {
    for (double s : {0.3, 1.0 / 3.0, 0.999999999, 1e-30}) {
      for (int64_t n = 0; n <= 70; ++n) {
        std::vector<float> y(n);
        for (int64_t i = 0; i < n; ++i) y[i] = i < 10 ? extremes[i] : normal(rng);
        std::vector<float> want(y);
        for (float& w : want) w = static_cast<float>(static_cast<double>(w) * s);
        simd::scale_by_double(y.data(), s, n);
        CHECK((n == 0 || std::memcmp(y.data(), want.data(), n * sizeof(float)) == 0));
      }
    }
  });
}

TEST_CASE("simd: max propagates NaN, and the Adam kernel matches its double formula") {
  for_each_isa([](simd::Isa) {
    std::vector<float> x(37, 1.0f);
    x[33] = NAN;
    CHECK(std::isnan(simd::max(x.data(), 37)));
    x[33] = 1.0f;
    x[3] = NAN;
    CHECK(std::isnan(simd::max(x.data(), 37)));

    int64_t n = 41;
    std::vector<float> p(n), g(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i)
      p[i] = 0.1f * i - 2, g[i] = 0.03f * (i % 7) - 0.1f, m[i] = 0.01f * i, v[i] = 0.001f * i;
    simd::AdamStep s{0.9f, 0.1f, 0.999f, 0.001f, 0.01f, 0.99f, 1e-3f, 1 / 0.19f, 1 / 0.002997f, 1e-8f};
    std::vector<float> p2 = p, m2 = m, v2 = v;
    simd::adam(s, p2.data(), g.data(), m2.data(), v2.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double d = g[i] + 0.01 * p[i];
      double mm = 0.9 * m[i] + 0.1 * d, vv = 0.999 * v[i] + 0.001 * d * d;
      double pp = p[i] * 0.99 - 1e-3 * (mm / 0.19) / (std::sqrt(vv / 0.002997) + 1e-8);
      // each within a few float roundings of its terms' size (the two terms may cancel)
      CHECK(m2[i] == Approx(mm).margin(3e-7 * (0.9 * std::fabs(m[i]) + 0.1 * std::fabs(d))));
      CHECK(v2[i] == Approx(vv).margin(3e-7 * (0.999 * v[i] + 0.001 * d * d)));
      CHECK(p2[i] == Approx(pp).epsilon(1e-6).margin(1e-8));
    }
  });
}
