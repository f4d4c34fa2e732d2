// Matmul: forward and backward side by side, every product a BLAS gemm.
#include "autograd/ops/matmul.h"

#include <cblas.h>

#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "autograd/cpu.h"
#ifdef QKV_HAVE_CUDA
#include "autograd/cuda/gemm.h"
#endif
#include "autograd/engine.h"
#include "autograd/ops/column_sums.h"
#include "autograd/ops/device_kernels.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/sgemm.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/strided_loop.h"
#include "autograd/parallel.h"
#include "autograd/profile.h"
#include "autograd/simd.h"

namespace qkv {

QKV_DECLARE_OP(matmul);
QKV_DECLARE_OP(linear);

namespace {

// C[n, m] = alpha·op(A) op(B) + beta·C, row-major, one BLAS call.
// A single output row is a matrix-vector product: gemv skips the packing a
// gemm does for every call (it dominated generating one token at a time).
void blas_gemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, float beta, float alpha) {
  static const bool checked = (cpu::warn_once_if_blas_is_slow(), true);  // fallback kernels: say so, once
  (void)checked;
  if (n == 1 && k > 0) {
    int64_t inc = ta ? lda : 1;                // a's one row: contiguous, or a column of the stored [k, 1]
    if (beta == 0) std::fill(c, c + m, 0.0f);  // y = 0·y would keep a NaN left in uninitialised memory
    if (tb)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, m, k, alpha, b, ldb, a, inc, beta, c, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasTrans, k, m, alpha, b, ldb, a, inc, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, m, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}
void blas_gemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const double* a, int64_t lda, const double* b,
               int64_t ldb, double* c, int64_t ldc, double beta, double alpha) {
  if (n == 1 && k > 0) {
    int64_t inc = ta ? lda : 1;
    if (beta == 0) std::fill(c, c + m, 0.0);
    if (tb)
      cblas_dgemv(CblasRowMajor, CblasNoTrans, m, k, alpha, b, ldb, a, inc, beta, c, 1);
    else
      cblas_dgemv(CblasRowMajor, CblasTrans, k, m, alpha, b, ldb, a, inc, beta, c, 1);
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, n, m, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

}  // namespace

// A product must be bit-identical for any thread count, and OpenBLAS's own
// threading is not (its k-blocks depend on the thread count: on Zen its sgemm
// rounds differently with 2 threads than with 1).
//
// Large float32 products (kOwnKernel multiply-adds and up) run qkv's own
// kernel (autograd/ops/sgemm.h), whose threads never split a sum: it scales
// past the four tiles below. Each thread gets at least kBlasSerial
// multiply-adds. Smaller ones (the attention kernel's blocks among them) stay
// with BLAS, whose small-matrix kernels skip the packing ours always does.
//
// Everything else (float64, small products, one-row products that BLAS does
// as a gemv, SSE2-only CPUs) splits the output into tiles, one
// single-threaded BLAS call each. The tiling depends only on the shapes.
// Products under kBlasSerial run on one thread at any thread count, so they
// are one call, untiled: halves of the attention's 64×64×32 blocks had
// taken OpenBLAS's packing path where whole ones take its small kernels.
// About four tiles, split along the rows (or along the columns of a wide,
// short output), so each call packs its shared operand as few times as
// possible; more tiles would pack it more often.
//
// A bias row is added by the own kernel as it writes C; BLAS gets it copied
// into C first and beta = 1: the same bits either way. Row sums of op(A)
// (linear's bias gradient beside its weight gradient) come from the own
// kernel's packing of A, or else from a column sum of the stored A: the same
// bits again.
template <class T> void gemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const T* a, int64_t lda, const T* b,
                             int64_t ldb, T* c, int64_t ldc, T beta, T alpha, const T* bias, T* a_row_sums) {
  constexpr int64_t kBlasSerial = 65536 * 4;  // smaller products stay on one thread: forking costs more
  constexpr int64_t kOwnKernel = int64_t{1} << 23;
  QKV_CHECK(!bias || beta == T(0), "gemm: a bias row replaces beta·C (beta must be 0)");
  QKV_CHECK(!a_row_sums || ta, "gemm: row sums are of a transposed A only");
  profile::Scope region(std::is_same_v<T, float> ? 's' : 'd', ta, tb, n, m, k);
  if constexpr (std::is_same_v<T, float>) {
    const int64_t work = n * m * k;
    int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(get_num_threads(), work / kBlasSerial));
    region.set_path("own", threads > 1);
    if (work >= kOwnKernel && n > 1 &&
        packed_sgemm(ta, tb, n, m, k, a, lda, b, ldb, c, ldc, beta, alpha, threads, bias, a_row_sums))
      return;
  }
  if (a_row_sums) column_sums(a, k, n, lda, a_row_sums);  // op(A)[i, k] = a[k·lda + i]
  if (bias) {
    parallel_for(n, m, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) std::copy(bias, bias + m, c + r * ldc);
    });
    beta = T(1);
  }
  constexpr int64_t kParts = 4, kMinRows = 32, kMinCols = 64;
  auto part = [](int64_t size, int64_t least) {  // tile length: size / kParts rounded up to 16, at least `least`
    return std::max(least, ((size + kParts - 1) / kParts + 15) / 16 * 16);
  };
  bool by_rows = n >= kParts * kMinRows || n >= m;
  int64_t tile_rows = by_rows ? part(n, kMinRows) : std::max<int64_t>(n, 1);
  int64_t tile_cols = by_rows ? std::max<int64_t>(m, 1) : part(m, kMinCols);
  int64_t row_tiles = (n + tile_rows - 1) / tile_rows, col_tiles = (m + tile_cols - 1) / tile_cols;
  auto tile = [&](int64_t t) {
    int64_t i0 = t / col_tiles * tile_rows, j0 = t % col_tiles * tile_cols;
    int64_t rows = std::min(tile_rows, n - i0), cols = std::min(tile_cols, m - j0);
    const T* at = ta ? a + i0 : a + i0 * lda;
    const T* bt = tb ? b + j0 * ldb : b + j0;
    blas_gemm(ta, tb, rows, cols, k, at, lda, bt, ldb, c + i0 * ldc + j0, ldc, beta, alpha);
  };
  int64_t tiles = row_tiles * col_tiles;
  if (get_num_threads() <= 1 || omp_in_parallel() || n * m * k < kBlasSerial) {
    // OpenBLAS follows OpenMP's thread count outside a parallel region and
    // would wake the pool for a small gemv; one thread is what we want here.
    int saved = omp_in_parallel() ? 1 : omp_get_max_threads();
    region.set_path("blas", false);
    if (saved > 1) omp_set_num_threads(1);
    if (n * m * k < kBlasSerial)  // serial at any thread count: one call (the attention's blocks)
      blas_gemm(ta, tb, n, m, k, a, lda, b, ldb, c, ldc, beta, alpha);
    else
      for (int64_t t = 0; t < tiles; ++t) tile(t);
    if (saved > 1) omp_set_num_threads(saved);
    return;
  }
  region.set_path("blas", true);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tiles; ++t) tile(t);
}
template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                          int64_t, float, float, const float*, float*);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                           double*, int64_t, double, double, const double*, double*);

namespace {

// gemm on a device other than the CPU: cuBLAS where the build has CUDA.
template <class T> void device_gemm(Device device, bool ta, bool tb, int64_t n, int64_t m, int64_t k, const T* a,
                                    int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b, T* c,
                                    int64_t ldc, int64_t stride_c, int64_t batch, T beta) {
  if (n > 0 && m > 0 && batch > 0) detail::count_device_launch();  // one cuBLAS call (it may launch more kernels)
#ifdef QKV_HAVE_CUDA
  if (device.is_cuda())
    return cuda::gemm_strided<T>(device.index, ta, tb, n, m, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c,
                                 batch, beta);
#endif
  // Without CUDA the only other device is the tests' stand-in, whose memory
  // is host memory: the CPU's gemm computes its products.
  (void)device;
  for (int64_t i = 0; i < batch; ++i)
    gemm<T>(ta, tb, n, m, k, a + i * stride_a, lda, b + i * stride_b, ldb, c + i * stride_c, ldc, beta);
}

// One product on a tensor's device: C = op(A) op(B) + beta C.
template <class T> void product(Device device, bool ta, bool tb, int64_t n, int64_t m, int64_t k, const T* a,
                                int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, T beta) {
  if (device.is_cpu()) return gemm<T>(ta, tb, n, m, k, a, lda, b, ldb, c, ldc, beta);
  device_gemm<T>(device, ta, tb, n, m, k, a, lda, 0, b, ldb, 0, c, ldc, 0, 1, beta);
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
  if (k == 0 || numel(shape) == 0) return Tensor::zeros(shape, a.dtype(), a.device());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  dispatch_floating(a.dtype(), "matmul", [&](auto zero) {
    using T = decltype(zero);
    // a, b and out share a device (common_device); product() reads their memory there.
    const T* pa = a.device_data<T>();
    const T* pb = b.device_data<T>();
    T* pc = out.device_data<T>();
    if (b_batch.empty() && !ta)  // [..., n, k] @ [k, m]: fold a's batch into rows, one gemm
      return product<T>(a.device(), false, tb, a.numel() / ac, m, k, pa, ac, pb, bc, pc, m, T(0));
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
    if (!a.device()
             .is_cpu()) {  // one strided-batched call when the offsets step evenly (always, unless broadcasting mixes)
      int64_t step_a = count > 1 ? a_off[1] : 0, step_b = count > 1 ? b_off[1] : 0;
      bool even = true;
      for (int64_t i = 0; i < count && even; ++i) even = a_off[i] == i * step_a && b_off[i] == i * step_b;
      if (even) {
        device_gemm<T>(a.device(), ta, tb, n, m, k, pa, ac, step_a, pb, bc, step_b, pc, m, n * m, count, T(0));
      } else {
        for (int64_t i = 0; i < count; ++i)
          device_gemm<T>(a.device(), ta, tb, n, m, k, pa + a_off[i], ac, 0, pb + b_off[i], bc, 0, pc + i * n * m, m, 0,
                         1, T(0));
      }
      return;
    }
    auto one = [&](int64_t i) {
      gemm<T>(ta, tb, n, m, k, pa + a_off[i], ac, pb + b_off[i], bc, pc + i * n * m, m, T(0));
    };
    if (n * m * k < kSmallProduct && count > 1 && get_num_threads() > 1) {
      profile::Scope region(sizeof(T) == 4 ? 's' : 'd', ta, tb, n, m, k);
      region.set_path("blas batch", true);
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
  common_device("matmul", {a, b});
  Tensor out = matmul_forward(a, b, ta, tb);
  if (needs_grad({a, b}))
    record("matmul", out, {a, b},
           [a = a.detach(), b = b.detach(), ta, tb, ra = a.requires_grad(),
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

// y = x·Wᵀ + b:  dx = g·W,  dW = gᵀ·x (rows of every batch folded),  db = Σ_rows g
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  common_device("linear", {x, weight, bias});
  QKV_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", shape_str(x.shape()),
            " and weight ", shape_str(weight.shape()), " do not fit (weight is [out, in])");
  QKV_CHECK(x.dtype() == weight.dtype(), "linear: dtypes differ: ", dtype_name(x.dtype()), " and ",
            dtype_name(weight.dtype()));
  const int64_t in = weight.size(1), out_features = weight.size(0);
  const int64_t rows = numel(Shape(x.shape().begin(), x.shape().end() - 1));  // not numel / in: in may be 0
  if (bias.defined())
    QKV_CHECK((bias.shape() == Shape{out_features} && bias.dtype() == x.dtype()), "linear: bias ",
              shape_str(bias.shape()), " ", dtype_name(bias.dtype()), " must be [", out_features, "] ",
              dtype_name(x.dtype()));
  Shape shape = x.shape();
  shape.back() = out_features;
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  Device device = x.device();
  if (in == 0 || rows == 0 || out_features == 0) {  // no products: the bias on every row, or zeros
    if (in == 0) y = bias.defined() ? expand(bias.detach(), shape) : Tensor::zeros(shape, x.dtype(), device);
  } else if (device.is_cpu()) {  // the product adds the bias as it writes y
    dispatch_floating(x.dtype(), "linear", [&](auto zero) {
      using T = decltype(zero);
      gemm<T>(false, true, rows, out_features, in, x.data<T>(), in, weight.data<T>(), in, y.data<T>(), out_features,
              T(0), T(1), bias.defined() ? bias.data<T>() : nullptr);
    });
  } else {  // the bias on every row, then the product adds onto it
    if (bias.defined()) device::strided_copy(bias, y, detail::broadcast_strides(bias.shape(), shape));
    dispatch_floating(x.dtype(), "linear", [&](auto zero) {
      using T = decltype(zero);
      product<T>(device, false, true, rows, out_features, in, x.device_data<T>(), in, weight.device_data<T>(), in,
                 y.device_data<T>(), out_features, bias.defined() ? T(1) : T(0));
    });
  }
  if (needs_grad({x, weight, bias}))
    record("linear", y, {x, weight, bias},
           [x = x.detach(), w = weight.detach(), rows, in, out_features, rx = x.requires_grad(),
            rw = weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) -> std::vector<Tensor> {
             // Each gradient is written whole by its gemm (beta = 0) or column sum; zeros only where nothing writes.
             bool gemm_x = rows > 0 && in > 0 && out_features > 0, gemm_w = rows > 0 && in > 0;
             auto fresh = [&g](const Shape& s, DType t, bool written) {
               return written ? Tensor::empty(s, t, g.device()) : Tensor::zeros(s, t, g.device());
             };
             Tensor gx = rx ? fresh(x.shape(), x.dtype(), gemm_x) : Tensor();
             Tensor gw = rw ? fresh(w.shape(), w.dtype(), gemm_w) : Tensor();
             Tensor gb = rb ? fresh({out_features}, w.dtype(), rows > 0) : Tensor();
             if (rows == 0) return {gx, gw, gb};
             dispatch_floating(x.dtype(), "linear", [&](auto zero) {
               using T = decltype(zero);
               Device device = g.device();
               const T* pg = g.device_data<T>();  // on the inputs' device, as the engine checks
               if (rx && gemm_x)
                 product<T>(device, false, false, rows, in, out_features, pg, out_features, w.device_data<T>(), in,
                            gx.device_data<T>(), in, T(0));
               // db = Σ_rows g: on the CPU, summed while dW's product packs g (one pass over g, not two).
               T* const summed_here = rb && device.is_cpu() ? gb.data<T>() : nullptr;
               const bool product_w = rw && gemm_w;
               if (product_w && device.is_cpu())
                 gemm<T>(true, false, out_features, in, rows, pg, out_features, x.data<T>(), in, gw.data<T>(), in, T(0),
                         T(1), nullptr, summed_here);
               else if (product_w)
                 product<T>(device, true, false, out_features, in, rows, pg, out_features, x.device_data<T>(), in,
                            gw.device_data<T>(), in, T(0));
               if (summed_here && !product_w) column_sums(pg, rows, out_features, out_features, summed_here);
               if (rb && !device.is_cpu()) device::sum_block(g, gb, rows, out_features);  // g as [1, rows, out]
             });
             return {gx, gw, gb};
           });
  return y;
}

}  // namespace qkv
