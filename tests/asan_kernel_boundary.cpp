// Run only in the sanitizer build. The vector kernels' files are built without
// AddressSanitizer, and autograd/simd.cpp checks each call's regions instead
// (CMakeLists.txt says why). This program makes calls that reach one value past
// a buffer; ctest expects ASan's report for each, so the boundary checks cannot
// quietly stop checking.
//
//   asan_kernel_boundary exp|tile|pack
#include <cstdio>
#include <memory>
#include <string>

#include "autograd/ops/sgemm.h"
#include "autograd/simd.h"

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  constexpr int64_t n = 24, m = 32, k = 16;
  if (what == "exp") {
    auto x = std::make_unique<float[]>(100), y = std::make_unique<float[]>(100);
    qkv::simd::exp(x.get(), y.get(), 101);
  } else if (what == "tile" || what == "pack") {
    if (qkv::simd::gemm_kernel().mr == 0) {
      std::puts("skipped: this CPU's vector level has no product kernel");
      return 0;
    }
    // One value short: C's last row (tile) or A's last row (pack).
    auto a = std::make_unique<float[]>(n * k - (what == "pack")), b = std::make_unique<float[]>(k * m);
    auto c = std::make_unique<float[]>(n * m - (what == "tile"));
    qkv::packed_sgemm(false, false, n, m, k, a.get(), k, b.get(), m, c.get(), m, 0.0f, 1.0f, 1);
  } else {
    std::fprintf(stderr, "usage: asan_kernel_boundary exp|tile|pack\n");
    return 2;
  }
  std::puts("no report: the call's regions were not checked");
  return 1;
}
