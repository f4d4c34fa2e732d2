// Matmul against a plain reference loop, for every transpose flag and batch
// layout, plus its errors.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>

#include "autograd/autograd.h"
#include "nn/nn.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
// op(a)[..., i, p] · op(b)[..., p, j], batch dims broadcast, element by element.
Tensor reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  NoGradGuard no_grad;
  Tensor A = ta ? transpose(a, -1, -2) : a, B = tb ? transpose(b, -1, -2) : b;
  Shape ab(A.shape().begin(), A.shape().end() - 2), bb(B.shape().begin(), B.shape().end() - 2);
  Shape batch = broadcast_shapes("reference", ab, bb);
  Shape sa = batch, sb = batch;
  sa.insert(sa.end(), A.shape().end() - 2, A.shape().end());
  sb.insert(sb.end(), B.shape().end() - 2, B.shape().end());
  Tensor Ae = expand(A, sa), Be = expand(B, sb);
  int64_t n = A.size(-2), k = A.size(-1), m = B.size(-1), count = numel(batch);
  std::vector<double> va = Ae.to_vector(), vb = Be.to_vector(), out(count * n * m, 0.0);
  for (int64_t q = 0; q < count; ++q)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t p = 0; p < k; ++p) out[(q * n + i) * m + j] += va[(q * n + i) * k + p] * vb[(q * k + p) * m + j];
  Shape shape = batch;
  shape.push_back(n);
  shape.push_back(m);
  return Tensor::from_vector(out, shape);
}

void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).margin(tol));
}
}  // namespace

TEST_CASE("matmul matches the reference for every flag and batch layout", "[matmul]") {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (Case c : {Case{{3, 4}, {4, 5}, false, false}, Case{{4, 3}, {4, 5}, true, false},
                 Case{{3, 4}, {5, 4}, false, true}, Case{{4, 3}, {5, 4}, true, true},
                 Case{{2, 3, 4}, {2, 4, 5}, false, false}, Case{{2, 1, 3, 4}, {3, 5, 4}, false, true},
                 Case{{2, 3, 4}, {4, 5}, false, false}, Case{{2, 4, 3}, {4, 5}, true, false},
                 Case{{3, 4}, {2, 4, 5}, false, false}, Case{{1, 64, 64}, {3, 64, 64}, false, true}}) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      Tensor a = Tensor::randn(c.a, dtype), b = Tensor::randn(c.b, dtype);
      INFO(shape_str(c.a) << (c.ta ? "T" : "") << " @ " << shape_str(c.b) << (c.tb ? "T" : "") << " "
                          << dtype_name(dtype));
      check_close(matmul(a, b, c.ta, c.tb), reference(a.to(DType::Float64), b.to(DType::Float64), c.ta, c.tb),
                  dtype == DType::Float64 ? 1e-12 : 1e-4);
    }
  }
}

TEST_CASE("matmul with a zero inner size gives zeros", "[matmul]") {
  Tensor out = matmul(Tensor::ones({2, 0}), Tensor::ones({0, 3}));
  CHECK(out.shape() == Shape{2, 3});
  CHECK(out.to_vector() == std::vector<double>(6, 0.0));
}

TEST_CASE("the gradient of a folded batch matmul sums over every row", "[matmul]") {
  // x [2, 3, 4] @ w [4, 5]: dw = Σ over all 6 rows of xᵀ g.
  Tensor x = Tensor::ones({2, 3, 4}, DType::Float64);
  Tensor w = Tensor::ones({4, 5}, DType::Float64).requires_grad_();
  sum(matmul(x, w)).backward();
  CHECK(w.grad().to_vector() == std::vector<double>(20, 6.0));
}

TEST_CASE("matmul errors name the shapes", "[matmul][errors]") {
  CHECK_THROWS_WITH(matmul(Tensor::ones({2, 3}), Tensor::ones({4, 5})),
                    Contains("matmul: [2, 3] @ [4, 5]: inner sizes 3 and 4 differ"));
  CHECK_THROWS_WITH(matmul(Tensor::ones({3}), Tensor::ones({3, 2})), Contains("rank >= 2") && Contains("[3]"));
  CHECK_THROWS_WITH(matmul(Tensor::ones({2, 2, 2}), Tensor::ones({3, 2, 2})),
                    Contains("matmul: shapes [2] and [3] do not broadcast"));
  CHECK_THROWS_WITH(matmul(Tensor::ones({2, 2}), Tensor::ones({2, 2}, DType::Float64)),
                    Contains("matmul: dtypes differ"));
}

TEST_CASE("matmul backward handles zero-size operands", "[matmul]") {
  Tensor a = Tensor::ones({2, 3, 0}).requires_grad_(), b = Tensor::ones({0, 5}).requires_grad_();
  sum(matmul(a, b)).backward();
  CHECK(a.grad().shape() == Shape{2, 3, 0});
  CHECK(b.grad().shape() == Shape{0, 5});
  Tensor c = Tensor::ones({2, 3, 4}).requires_grad_(), d = Tensor::ones({4, 0}).requires_grad_();
  sum(matmul(c, d)).backward();
  CHECK(d.grad().shape() == Shape{4, 0});
  CHECK(c.grad().to_vector() == std::vector<double>(24, 0.0));
}

TEST_CASE("products split into tiles across threads equal a plain triple loop, for 1 and 2 threads",
          "[matmul][threads]") {
  // Shapes that tile by rows, by columns (short and wide), and not at all.
  for (auto [n, k, m] : {std::array<int64_t, 3>{300, 70, 45}, {20, 64, 700}, {129, 33, 257}, {3, 5, 7}, {1, 40, 9}}) {
    Tensor a = Tensor::randn({n, k}, DType::Float64), b = Tensor::randn({m, k}, DType::Float64);
    std::vector<double> pa = a.to_vector(), pb = b.to_vector();
    std::vector<Tensor> results;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      results.push_back(matmul(a, b, false, true));
    }
    set_num_threads(0);
    CHECK(results[0].to_vector() == results[1].to_vector());
    std::vector<double> c = results[0].to_vector();
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += pa[i * k + t] * pb[j * k + t];
        worst = std::max(worst, std::fabs(s - c[i * m + j]));
      }
    CHECK(worst < 1e-11);
  }
}

TEST_CASE("one-row products (matrix-vector) for every transpose flag, in both dtypes", "[matmul]") {
  for (DType dtype : {DType::Float32, DType::Float64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Tensor a = Tensor::randn(ta ? Shape{6, 1} : Shape{1, 6}, dtype),
               b = Tensor::randn(tb ? Shape{5, 6} : Shape{6, 5}, dtype);
        Tensor c = matmul(a, b, ta, tb);
        for (int64_t j = 0; j < 5; ++j) {
          double s = 0;
          for (int64_t t = 0; t < 6; ++t)
            s += a.at(ta ? std::vector<int64_t>{t, 0} : std::vector<int64_t>{0, t}) *
                 b.at(tb ? std::vector<int64_t>{j, t} : std::vector<int64_t>{t, j});
          CHECK(c.at({0, j}) == Approx(s).margin(1e-5));
        }
      }
}

TEST_CASE("linear errors name the shapes and dtypes that do not fit", "[matmul][linear][errors]") {
  Tensor x = Tensor::randn({2, 3}), w = Tensor::randn({4, 3}), b = Tensor::randn({4});
  CHECK(linear(x, w, b).shape() == Shape{2, 4});
  CHECK_THROWS_WITH(linear(x, Tensor::randn({4, 5}), b),
                    Catch::Matchers::Contains("linear: input [2, 3] and weight [4, 5]"));
  CHECK_THROWS_WITH(linear(x, Tensor::randn({3}), Tensor()), Catch::Matchers::Contains("weight is [out, in]"));
  CHECK_THROWS_WITH(linear(x, w, Tensor::randn({3})), Catch::Matchers::Contains("linear: bias [3]"));
  CHECK_THROWS_WITH(linear(x, w.to(DType::Float64), Tensor()), Catch::Matchers::Contains("dtypes differ"));
  CHECK_THROWS_WITH(linear(x, w, b.to(DType::Float64)), Catch::Matchers::Contains("linear: bias [4] float64"));
}

TEST_CASE("linear's bias gradient and LayerNorm's parameter gradients keep their bits for any thread count",
          "[matmul][threads]") {
  // Column sums split over threads by 16-column chunks: widths around a chunk, rows in any number.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7}, {33, 16}, {70, 130}, {257, 4100}, {2048, 40}}) {
    Generator gen(static_cast<uint64_t>(rows * 7 + cols));
    Tensor x = Tensor::randn({rows, cols}, DType::Float32, &gen), g = Tensor::randn({rows, cols}, DType::Float32, &gen);
    // The linear's input is narrow: the sums under test are over its output's columns, and a
    // [cols, cols] weight made this the sanitizer pass's slowest test (a 4100² product, 22 s).
    Tensor thin = Tensor::randn({rows, 8}, DType::Float32, &gen), w = Tensor::randn({cols, 8}, DType::Float32, &gen);
    auto grads = [&](int threads) {
      set_num_threads(threads);
      Tensor b = Tensor::zeros({cols}).requires_grad_();
      nn::LayerNorm norm(cols);
      (sum(linear(thin, w, b) * g) + sum(norm.forward(x) * g)).backward();
      set_num_threads(0);
      std::vector<double> out = b.grad().to_vector(), gw = norm.weight.grad().to_vector(),
                          gb = norm.bias.grad().to_vector();
      out.insert(out.end(), gw.begin(), gw.end());
      out.insert(out.end(), gb.begin(), gb.end());
      return out;
    };
    std::vector<double> one = grads(1);
    bool same = true;
    for (int threads : {2, 3, 16}) same = same && grads(threads) == one;
    CHECK(same);
    // The bias gradient is g's column sums: float32 sums of `rows` terms, within (rows - 1)·u·Σ|g|.
    std::vector<double> gv = g.to_vector();
    double worst = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double exact = 0, magnitude = 0;
      for (int64_t r = 0; r < rows; ++r) exact += gv[r * cols + c], magnitude += std::abs(gv[r * cols + c]);
      worst = std::max(worst, std::abs(one[c] - exact) - static_cast<double>(rows - 1) * 0x1p-24 * magnitude);
    }
    CHECK(worst <= 0);
  }
}

TEST_CASE("linear's bias gradient has the same bits whether or not its weight gradient is computed beside it",
          "[matmul][linear][threads]") {
  // With the weight's gradient, the bias's is summed while that product packs g (qkv's own kernel) or by a
  // column sum inside gemm (BLAS); without it, by a column sum on its own. [6, 200, 40] → 48 takes BLAS;
  // [4, 256, 96] → 160 the own kernel, split by rows; [2, 1024, 256] → 24 the own kernel, split by columns
  // at 2 and 3 threads (every thread packs all of g, and one adds); 5 and 16 threads pack together.
  Generator gen(8);
  for (auto [xs, out] : {std::pair<Shape, int64_t>{{6, 200, 40}, 48}, {{4, 256, 96}, 160}, {{2, 1024, 256}, 24}})
    for (DType dtype : {DType::Float32, DType::Float64}) {
      INFO(shape_str(xs) << " -> " << out << " " << dtype_name(dtype));
      Tensor x = Tensor::randn(xs, dtype, &gen), g = Tensor::randn({xs[0], xs[1], out}, dtype, &gen);
      Tensor w0 = Tensor::randn({out, xs[2]}, dtype, &gen);
      auto bias_grad = [&](bool with_weight, int threads) {
        set_num_threads(threads);
        Tensor w = w0.detach().requires_grad_(with_weight), b = Tensor::zeros({out}, dtype).requires_grad_();
        sum(linear(x, w, b) * g).backward();
        set_num_threads(0);
        return b.grad().to_vector();
      };
      const std::vector<double> alone = bias_grad(false, 1);
      for (int threads : {1, 2, 3, 5, 16}) {
        INFO(threads << " threads");
        bool same = bias_grad(true, threads) == alone && bias_grad(false, threads) == alone;
        CHECK(same);
      }
    }
}

TEST_CASE("linear's bias gradient sums over every row of a folded batch", "[matmul][linear]") {
  Generator gen(3);
  Tensor x = Tensor::randn({3, 50, 6}, DType::Float64, &gen), w = Tensor::randn({5, 6}, DType::Float64, &gen);
  Tensor b = Tensor::randn({5}, DType::Float64, &gen).requires_grad_();
  Tensor g = Tensor::randn({3, 50, 5}, DType::Float64, &gen);
  sum(linear(x, w, b) * g).backward();
  std::vector<double> expect = sum(reshape(g, {150, 5}), {0}).to_vector();
  std::vector<double> got = b.grad().to_vector();
  REQUIRE(got.size() == expect.size());
  for (size_t c = 0; c < got.size(); ++c) CHECK(got[c] == Approx(expect[c]).epsilon(1e-13));
}

TEST_CASE("linear adds its bias with the bits of matmul then add (inputs within one k-block), on both product paths",
          "[matmul][linear]") {
  Generator gen(4);
  // [6, 200, 40] x [48, 40]ᵀ is 2.3M multiply-adds (BLAS); [4, 256, 96] x [160, 96]ᵀ is 15.7M (qkv's own kernel,
  // which adds the bias as it writes the output), so both paths are compared. Past one k-block (512 inputs) the
  // bias joins the first block's sum, (P1 + b) + P2, as it did when it was copied into the output first.
  for (Shape xs : {Shape{6, 200, 40}, Shape{4, 256, 96}})
    for (DType dtype : {DType::Float32, DType::Float64}) {
      INFO(shape_str(xs) << " " << dtype_name(dtype));
      const int64_t in = xs.back(), out = in == 40 ? 48 : 160;
      Tensor x = Tensor::randn(xs, dtype, &gen), w = Tensor::randn({out, in}, dtype, &gen);
      Tensor b = Tensor::randn({out}, dtype, &gen);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        bool same = linear(x, w, b).to_vector() == (matmul(x, w, false, true) + b).to_vector();
        CHECK(same);
      }
      set_num_threads(0);
    }
  // No inputs (in = 0): every row is the bias, and the bias's gradient counts every row (as PyTorch's).
  Tensor b = Tensor::randn({3}, DType::Float32, &gen).requires_grad_();
  Tensor y = linear(Tensor::zeros({2, 2, 0}), Tensor::zeros({3, 0}), b);
  CHECK(y.shape() == Shape{2, 2, 3});
  bool rows_are_bias = y.to_vector() == expand(b.detach(), {2, 2, 3}).to_vector();
  CHECK(rows_are_bias);
  sum(y).backward();
  CHECK(b.grad().to_vector() == std::vector<double>{4, 4, 4});
}
