// float32 512x512x512 matmul through the tensor API next to a direct
// cblas_sgemm call, interleaved in one run so machine noise hits both alike.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "autograd/autograd.h"

using namespace qkv;

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 512;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 30;
  Tensor a = Tensor::randn({n, n}), b = Tensor::randn({n, n});
  Tensor c = Tensor::empty({n, n});
  std::vector<double> api, direct;
  auto time_api = [&] {
    auto t0 = std::chrono::steady_clock::now();
    Tensor out = matmul(a, b);
    return seconds_since(t0);
  };
  auto time_direct = [&] {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                c.data<float>(), n);
    return seconds_since(t0);
  };
  for (int r = 0; r < repeats + 3; ++r) {
    // Alternate which goes first, so neither always inherits the other's cache state.
    double t_api, t_direct;
    if (r % 2) {
      t_api = time_api();
      t_direct = time_direct();
    } else {
      t_direct = time_direct();
      t_api = time_api();
    }
    if (r >= 3) {  // the first runs warm caches and the thread pool
      api.push_back(t_api);
      direct.push_back(t_direct);
    }
  }
  double flops = 2.0 * n * n * n;
  double g_api = flops / median(api) / 1e9, g_direct = flops / median(direct) / 1e9;
  std::printf("matmul %lldx%lldx%lld float32, %d threads, OpenBLAS core %s, median of %d\n", static_cast<long long>(n),
              static_cast<long long>(n), static_cast<long long>(n), get_num_threads(), openblas_get_corename(),
              repeats);
  std::printf("  tensor API    %7.1f GFLOP/s\n  cblas_sgemm   %7.1f GFLOP/s\n  ratio         %7.3f\n", g_api, g_direct,
              g_api / g_direct);
}
