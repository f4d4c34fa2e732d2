// qkv's own float32 matrix product: the loops around the micro-kernel.
//
// BLIS's layout (Van Zee and van de Geijn): for each block of k (depth kKc),
// op(A)'s rows are packed into panels of mr rows and op(B)'s columns into
// panels of nr columns, as the micro-kernel reads them, and the block's tiles
// are computed from the packed panels. No thread ever splits a sum over k, and
// the k-blocks are fixed by k alone, so which thread computes a tile changes
// nothing in its bits. That is why qkv does not let OpenBLAS thread its
// products (its k-blocks depend on the thread count).
//
// Two ways to share a product, chosen by the team's size (neither changes a
// bit of C):
//  - a few threads (up to kPrivateTeam) each take a run of rows (or of
//    columns), pack what they need for themselves, and never wait;
//  - more threads pack each block together, wait once, and split its tiles:
//    packing all of B in every thread would cost more the larger the team.
#include "autograd/ops/sgemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/simd.h"

namespace qkv {

namespace {

constexpr int64_t kKc = 512;         // depth of a k-block: an A panel (mr × kKc, 24 KiB) sits in L1
constexpr int64_t kMaxRows = 1536;   // rows packed at once (a multiple of every mr): ≤ 3 MiB of A
constexpr int64_t kMaxCols = 2048;   // columns packed at once: ≤ 4 MiB of B
constexpr int64_t kGroupCols = 8;    // column panels whose tiles are computed together, row panel by row panel
constexpr int64_t kPrivateTeam = 4;  // teams up to this size pack privately, without barriers

int64_t round16(int64_t floats) { return (floats + 15) / 16 * 16; }  // keeps every part 64-byte aligned

// Thread `me`'s equal share [begin, end) of `count` items among `team` threads.
void share(int64_t count, int64_t me, int64_t team, int64_t& begin, int64_t& end) {
  begin = count * me / team;
  end = count * (me + 1) / team;
}

// The calling thread's packing buffer, 64-byte aligned, grown as needed.
float* packing_buffer(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < floats + 16) buffer.resize(floats + 16);
  auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<float*>((address + 63) / 64 * 64);
}

// One product's operands and the loops over its blocks.
struct Product {
  simd::GemmKernel kernel;
  bool ta, tb;
  int64_t n, m, k;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  float alpha, beta;
  const float* bias;  // or null
  float* row_sums;    // or null: op(A)'s row sums, added while packing A (trans A only)

  int64_t depth() const { return std::min(k, kKc); }
  int64_t a_panels(int64_t rows) const { return (rows + kernel.mr - 1) / kernel.mr; }
  int64_t b_panels(int64_t cols) const { return (cols + kernel.nr - 1) / kernel.nr; }

  // Tile (p, q) of the block at rows i0, columns j0, depth p0, from packed panels: A's panel p at
  // pa + (p − p_first)·mr·kc, B's panel q at pb + (q − q_first)·nr·kc.
  void tile(int64_t i0, int64_t rows, int64_t j0, int64_t cols, int64_t p0, int64_t kc, const float* pa,
            int64_t p_first, const float* pb, int64_t q_first, int64_t p, int64_t q) const {
    const int mr = kernel.mr, nr = kernel.nr;
    kernel.tile({kc, pa + (p - p_first) * mr * kc, pb + (q - q_first) * nr * kc, c + (i0 + p * mr) * ldc + j0 + q * nr,
                 ldc, std::min<int64_t>(mr, rows - p * mr), std::min<int64_t>(nr, cols - q * nr), alpha, beta, p0 == 0,
                 bias ? bias + j0 + q * nr : nullptr});
  }

  // Thread `me` of a small team: a run of each block's row panels (with all its column panels), or of its
  // column panels (with all its rows), whichever costs the busiest thread less; it packs what it needs in its
  // own buffer, so a split by rows packs all of B in every thread, and a split by columns all of A. A thread's
  // cost, per unit of depth: its tiles' multiply-adds, plus kPackCost for each row and column it packs. (By
  // evenness alone, a [1088, 64]·[64, 192] product split its 6 column panels, every thread packed all 1088
  // rows of A, and 2 threads ran 13% slower than 4 BLAS tiles; split by rows, 5%.)
  void run_private(int64_t me, int64_t team) const {
    // A packed element against a vector FMA's multiply-adds (16 on AVX-512, 8 on AVX2).
    constexpr int64_t kPackCost = 16;
    const int mr = kernel.mr, nr = kernel.nr;
    auto busiest = [&](int64_t count) { return (count + team - 1) / team; };
    for (int64_t i0 = 0; i0 < n; i0 += kMaxRows) {
      const int64_t rows = std::min(kMaxRows, n - i0), p_count = a_panels(rows);
      for (int64_t j0 = 0; j0 < m; j0 += kMaxCols) {
        const int64_t cols = std::min(kMaxCols, m - j0), q_count = b_panels(cols);
        const int64_t by_rows = busiest(p_count) * mr, by_cols = busiest(q_count) * nr;
        const int64_t rows_cost = by_rows * q_count * nr + kPackCost * (by_rows + cols);
        const int64_t cols_cost = p_count * mr * by_cols + kPackCost * (rows + by_cols);
        int64_t p_begin = 0, p_end = p_count, q_begin = 0, q_end = q_count;
        if (rows_cost <= cols_cost)
          share(p_count, me, team, p_begin, p_end);
        else
          share(q_count, me, team, q_begin, q_end);
        if (p_begin == p_end || q_begin == q_end) continue;
        const int64_t a_floats = round16((p_end - p_begin) * mr * depth());
        float* const pa = packing_buffer(a_floats + round16((q_end - q_begin) * nr * depth()));
        float* const pb = pa + a_floats;
        // Row sums once per row: in the first column block, by the thread that packs those rows (split by
        // columns, every thread packs them all; the last always has columns, so it adds).
        float* const sums = row_sums && j0 == 0 && (rows_cost <= cols_cost || me == team - 1) ? row_sums + i0 : nullptr;
        for (int64_t p0 = 0; p0 < k; p0 += kKc) {
          const int64_t kc = std::min(kKc, k - p0);
          kernel.pack_a({ta, a, lda, i0, rows, p0, kc, p_begin, p_end, pa, sums});
          kernel.pack_b({tb, b, ldb, j0, cols, p0, kc, q_begin, q_end, pb});
          for (int64_t first_q = q_begin; first_q < q_end; first_q += kGroupCols)
            for (int64_t p = p_begin; p < p_end; ++p)
              for (int64_t q = first_q; q < std::min(q_end, first_q + kGroupCols); ++q)
                tile(i0, rows, j0, cols, p0, kc, pa, p_begin, pb, q_begin, p, q);
        }
      }
    }
  }

  // Thread `me` of a larger team: equal shares of each block's packing into the shared buffer, a barrier,
  // then an equal run of its tiles. Two sets of packed blocks alternate: a thread packs the next block into
  // one while others still compute from the other, so one barrier a block suffices.
  void run_shared(int64_t me, int64_t team, float* buffer, int64_t a_floats, int64_t set_floats) const {
    const int mr = kernel.mr, nr = kernel.nr;
    int64_t block = 0;  // k-blocks so far: its parity picks the set
    for (int64_t i0 = 0; i0 < n; i0 += kMaxRows) {
      const int64_t rows = std::min(kMaxRows, n - i0), p_count = a_panels(rows);
      for (int64_t j0 = 0; j0 < m; j0 += kMaxCols) {
        const int64_t cols = std::min(kMaxCols, m - j0), q_count = b_panels(cols);
        for (int64_t p0 = 0; p0 < k; p0 += kKc) {
          const int64_t kc = std::min(kKc, k - p0);
          float* const pa = buffer + (block++ % 2) * set_floats;
          float* const pb = pa + a_floats;
          int64_t begin, end;
          share(p_count, me, team, begin, end);
          if (begin < end)  // a block's rows are packed by one thread, the same one in every k-block
            kernel.pack_a({ta, a, lda, i0, rows, p0, kc, begin, end, pa + begin * mr * kc,
                           row_sums && j0 == 0 ? row_sums + i0 : nullptr});
          share(q_count, me, team, begin, end);
          if (begin < end) kernel.pack_b({tb, b, ldb, j0, cols, p0, kc, begin, end, pb + begin * nr * kc});
#pragma omp barrier
          // Tiles in the order: groups of kGroupCols column panels, then every row panel, then the group's
          // columns; a share is a run of that order. A's panel (mr × kc) stays in L1 while the group's B
          // panels (kGroupCols·nr × kc, 512 KiB at most) stream from L2, as in BLIS.
          share(p_count * q_count, me, team, begin, end);
          for (int64_t t = begin; t < end; ++t) {
            const int64_t first_q = t / (kGroupCols * p_count) * kGroupCols;
            const int64_t in_group = std::min(kGroupCols, q_count - first_q), rest = t - first_q * p_count;
            tile(i0, rows, j0, cols, p0, kc, pa, 0, pb, 0, rest / in_group, first_q + rest % in_group);
          }
          // No barrier here: the next block packs into the other set, which every thread finished reading
          // before the barrier above, and each thread's next tiles are its own (shares depend only on sizes).
        }
      }
    }
  }
};

}  // namespace

bool packed_sgemm(bool ta, bool tb, int64_t n, int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, float beta, float alpha, int threads, const float* bias,
                  float* row_sums) {
  const simd::GemmKernel kernel = simd::gemm_kernel();
  if (kernel.mr == 0 || k == 0 || (bias && beta != 0) || (row_sums && (!ta || m == 0)))
    return false;  // k = 0: C = beta·C, left to BLAS (as are row sums without columns to pack A for)
  if (n == 0 || m == 0) return true;
  if (row_sums) std::fill(row_sums, row_sums + n, 0.0f);
  const Product product{kernel, ta, tb, n, m, k, a, lda, b, ldb, c, ldc, alpha, beta, bias, row_sums};
  if (threads <= kPrivateTeam) {
#pragma omp parallel num_threads(threads) if (threads > 1)
    product.run_private(omp_get_thread_num(), omp_get_num_threads());
    return true;
  }
  // The shared buffer belongs to the calling thread: two sets of one block of A and one of B.
  const int64_t a_floats = round16(product.a_panels(std::min(n, kMaxRows)) * kernel.mr * product.depth());
  const int64_t set_floats = a_floats + round16(product.b_panels(std::min(m, kMaxCols)) * kernel.nr * product.depth());
  float* const buffer = packing_buffer(2 * set_floats);
#pragma omp parallel num_threads(threads)
  product.run_shared(omp_get_thread_num(), omp_get_num_threads(), buffer, a_floats, set_floats);
  return true;
}

}  // namespace qkv
