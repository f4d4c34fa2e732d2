// qkv's own float32 matrix product: the loops around the micro-kernel.
//
// BLIS's layout (Van Zee and van de Geijn): for each block of k (depth kKc),
// op(A)'s rows are packed into panels of mr rows and op(B)'s columns into
// panels of nr columns, each panel k-major, so the micro-kernel reads both
// with unit stride. The threads pack the block together, then split its
// tiles. No thread ever splits a sum over k, and the k-blocks are fixed by k
// alone, so which thread computes a tile changes nothing in its bits; that is
// why qkv does not let OpenBLAS thread its products (its k-blocks depend on
// the thread count), and why this can share each packed block where
// single-threaded BLAS calls on fixed tiles each packed their own.
#include "autograd/ops/sgemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/simd.h"

namespace qkv {

namespace {

constexpr int64_t kKc = 512;        // depth of a k-block: an A panel (mr × kKc, 24 KiB) sits in L1
constexpr int64_t kMaxRows = 1536;  // rows packed at once (a multiple of every mr): ≤ 3 MiB of A
constexpr int64_t kMaxCols = 2048;  // columns packed at once: ≤ 4 MiB of B
constexpr int64_t kGroupCols = 8;   // column panels whose tiles are computed together, row panel by row panel

// A calling thread's packing buffer, 64-byte aligned, grown as needed.
float* packing_buffer(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < floats + 16) buffer.resize(floats + 16);
  auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<float*>((address + 63) / 64 * 64);
}

}  // namespace

bool packed_sgemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, float beta, float alpha, int threads) {
  const simd::GemmKernel kernel = simd::gemm_kernel();
  if (kernel.mr == 0 || k == 0) return false;  // k = 0: C = beta·C, left to BLAS
  if (n == 0 || m == 0) return true;
  const int mr = kernel.mr, nr = kernel.nr;
  const int64_t block_rows = std::min(n, kMaxRows), block_cols = std::min(m, kMaxCols);
  const int64_t a_panels_max = (block_rows + mr - 1) / mr, b_panels_max = (block_cols + nr - 1) / nr;
  // Two sets of packed blocks: threads pack the next k-block into one while others still compute from the
  // other, so one barrier a block suffices. Each part is rounded to 16 floats: B's panels stay 64-byte aligned.
  auto round16 = [](int64_t floats) { return (floats + 15) / 16 * 16; };
  const int64_t depth = std::min(k, kKc);
  const int64_t a_floats = round16(a_panels_max * mr * depth);
  const int64_t set_floats = a_floats + round16(b_panels_max * nr * depth);
  float* const buffer = packing_buffer(2 * set_floats);

  // Every thread runs the same block loops and takes an equal share of each block's packing, then (after a
  // barrier) of its tiles. How tiles are shared out changes no tile's bits, so the shares follow the thread count.
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    auto share = [&](int64_t count, int64_t& begin, int64_t& end) {
      begin = count * me / team;
      end = count * (me + 1) / team;
    };
    int64_t block = 0;  // k-blocks so far: its parity picks the set
    for (int64_t i0 = 0; i0 < n; i0 += kMaxRows) {
      const int64_t rows = std::min(kMaxRows, n - i0), a_panels = (rows + mr - 1) / mr;
      for (int64_t j0 = 0; j0 < m; j0 += kMaxCols) {
        const int64_t cols = std::min(kMaxCols, m - j0), b_panels = (cols + nr - 1) / nr;
        for (int64_t p0 = 0; p0 < k; p0 += kKc) {
          const int64_t kc = std::min(kKc, k - p0);
          float* const packed_a = buffer + (block++ % 2) * set_floats;
          float* const packed_b = packed_a + a_floats;
          int64_t begin, end;
          share(a_panels, begin, end);
          if (begin < end) kernel.pack_a({ta, a, lda, i0, rows, p0, kc, begin, end, packed_a});
          share(b_panels, begin, end);
          if (begin < end) kernel.pack_b({tb, b, ldb, j0, cols, p0, kc, begin, end, packed_b});
#pragma omp barrier
          // Tiles in the order: groups of kGroupCols column panels, then every row panel, then the group's
          // columns; a share is a run of that order. A's panel (mr × kc) stays in L1 while the group's B panels
          // (kGroupCols·nr × kc, 512 KiB at most) stream from L2, as in BLIS.
          share(a_panels * b_panels, begin, end);
          for (int64_t t = begin; t < end; ++t) {
            const int64_t group = t / (kGroupCols * a_panels), first_q = group * kGroupCols;
            const int64_t in_group = std::min(kGroupCols, b_panels - first_q);
            const int64_t rest = t - first_q * a_panels, p = rest / in_group, q = first_q + rest % in_group;
            kernel.tile({kc, packed_a + p * mr * kc, ta ? 0 : kc, packed_b + q * nr * kc,
                         c + (i0 + p * mr) * ldc + j0 + q * nr, ldc, std::min<int64_t>(mr, rows - p * mr),
                         std::min<int64_t>(nr, cols - q * nr), alpha, beta, p0 == 0});
          }
          // No barrier here: the next block packs into the other set, which every thread finished reading
          // before the barrier above, and each thread's next tiles are its own (shares depend only on sizes).
        }
      }
    }
  }
  return true;
}

}  // namespace qkv
