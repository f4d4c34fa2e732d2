// Matmul: forward and backward side by side, every product a BLAS gemm.
#include "autograd/ops/matmul.h"

#include <cblas.h>

#include <vector>

#include "autograd/engine.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/parallel.h"

namespace qkv {

QKV_DECLARE_OP(matmul);

namespace {

// C[n, m] = op(A) op(B), row-major; lda/ldb are A's and B's row lengths.
void gemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, m, k, 1.0f, a, lda,
              b, ldb, 0.0f, c, m);
}
void gemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double* c) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, m, k, 1.0, a, lda, b,
              ldb, 0.0, c, m);
}

// Below this many multiply-adds per product, a batch runs one product per
// thread instead of letting BLAS split each small product.
constexpr int64_t kSmallProduct = 128 * 128 * 128;

Tensor matmul_forward(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  QKV_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: operands need rank >= 2, got ", shape_str(a.shape()), " and ",
        shape_str(b.shape()));
  QKV_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ: ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  int64_t ar = a.size(-2), ac = a.size(-1), br = b.size(-2), bc = b.size(-1);
  int64_t n = ta ? ac : ar, k = ta ? ar : ac, kb = tb ? bc : br, m = tb ? br : bc;
  QKV_CHECK(k == kb, "matmul: ", shape_str(a.shape()), (ta ? "ᵀ" : ""), " @ ", shape_str(b.shape()), (tb ? "ᵀ" : ""),
        ": inner sizes ", k, " and ", kb, " differ");
  Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes("matmul", a_batch, b_batch);
  Shape shape = batch;
  shape.push_back(n);
  shape.push_back(m);
  Tensor out = Tensor::empty(shape, a.dtype());
  if (out.numel() == 0) return out;
  dispatch_floating(a.dtype(), "matmul", [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    if (k == 0) {
      std::fill(pc, pc + out.numel(), T(0));
      return;
    }
    if (b_batch.empty() && !ta) {  // [..., n, k] @ [k, m]: fold a's batch into rows, one gemm
      gemm(false, tb, a.numel() / ac, m, k, pa, ac, pb, bc, pc);
      return;
    }
    // One gemm per batch entry; operand offsets follow broadcasting (stride 0).
    int64_t count = numel(batch), rank = static_cast<int64_t>(batch.size());
    std::vector<int64_t> a_off(count), b_off(count);
    for (int64_t i = 0; i < count; ++i) {
      int64_t rest = i, oa = 0, ob = 0, sa = ar * ac, sb = br * bc;
      for (int64_t d = rank - 1; d >= 0; --d) {
        int64_t idx = rest % batch[d];
        rest /= batch[d];
        int64_t da = d - (rank - static_cast<int64_t>(a_batch.size()));
        int64_t db = d - (rank - static_cast<int64_t>(b_batch.size()));
        if (da >= 0) {
          if (a_batch[da] != 1) oa += idx * sa;
          sa *= a_batch[da];
        }
        if (db >= 0) {
          if (b_batch[db] != 1) ob += idx * sb;
          sb *= b_batch[db];
        }
      }
      a_off[i] = oa;
      b_off[i] = ob;
    }
    auto one = [&](int64_t i) { gemm(ta, tb, n, m, k, pa + a_off[i], ac, pb + b_off[i], bc, pc + i * n * m); };
    if (n * m * k < kSmallProduct && count > 1 && get_num_threads() > 1) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < count; ++i) one(i);  // BLAS runs single-threaded inside
    } else {
      for (int64_t i = 0; i < count; ++i) one(i);
    }
  });
  return out;
}

}  // namespace

// C = op(A) op(B):  dop(A) = G op(B)ᵀ,  dop(B) = op(A)ᵀ G; a transposed operand
// takes the transpose of that, which is again one gemm with swapped flags.
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor out = matmul_forward(a, b, ta, tb);
  if (needs_grad({a, b}))
    record("matmul", out, {a, b}, [a = a.detach(), b = b.detach(), ta, tb, ra = a.requires_grad(),
                                   rb = b.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
      Tensor ga, gb;
      if (ra) ga = sum_to(ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb), a.shape());
      if (rb) {
        if (b.dim() == 2 && a.dim() > 2 && !ta) {  // folded rows: one gemm over all of them
          int64_t rows = numel(Shape(a.shape().begin(), a.shape().end() - 1));
          Tensor a2 = reshape(a, {rows, a.size(-1)}), g2 = reshape(g, {rows, g.size(-1)});
          gb = tb ? matmul(g2, a2, true, false) : matmul(a2, g2, true, false);
        } else {
          gb = sum_to(tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false), b.shape());
        }
      }
      return {ga, gb};
    });
  return out;
}

}  // namespace qkv
