// compare_checkpoints A B TOL: every floating tensor of two safetensors files
// (same names, same shapes) agrees to TOL relative: max|a - b| <= TOL *
// max|a| per tensor. Prints the worst tensor; exits 1 when any differs.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "nn/checkpoint.h"

int main(int argc, char** argv) {
  using namespace qkv;
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_checkpoints A B TOL\n");
    return 2;
  }
  try {
    io::TensorFile a = io::load_safetensors(argv[1]), b = io::load_safetensors(argv[2]);
    double tol = std::atof(argv[3]), worst = 0;
    std::string worst_name;
    int compared = 0;
    for (const auto& [name, x] : a.tensors) {
      Tensor y = b.get(name);
      if (!y.defined() || y.shape() != x.shape() || y.dtype() != x.dtype()) {
        std::printf("FAIL: %s differs in presence, shape or dtype\n", name.c_str());
        return 1;
      }
      if (!is_floating(x.dtype())) continue;
      Tensor p = x.to(DType::Float64), q = y.to(DType::Float64);
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < p.numel(); ++i) {
        diff = std::max(diff, std::abs(p.data<double>()[i] - q.data<double>()[i]));
        scale = std::max(scale, std::abs(p.data<double>()[i]));
      }
      double rel = scale > 0 ? diff / scale : diff;
      if (rel >= worst) worst = rel, worst_name = name;
      ++compared;
    }
    if (a.tensors.size() != b.tensors.size()) {
      std::printf("FAIL: %zu tensors against %zu\n", a.tensors.size(), b.tensors.size());
      return 1;
    }
    std::printf("%s: %d tensors, worst relative difference %.3g (%s), tolerance %.3g\n", worst <= tol ? "ok" : "FAIL",
                compared, worst, worst_name.c_str(), tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_checkpoints: %s\n", e.what());
    return 2;
  }
}
