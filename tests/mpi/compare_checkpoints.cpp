// compare_checkpoints A B TOL: every floating tensor of two safetensors files
// (same names, same shapes) agrees to TOL relative to its group's scale:
// max|a - b| <= TOL * max|a| over the group, where a group is the parameters
// or one optimizer buffer (every exp_avg, every exp_avg_sq). Prints the worst
// tensor; exits 1 when any differs, 2 when a file cannot be read.
//
// Why the group's scale and not each tensor's own: two runs that add the same
// float32 terms in another order (2 ranks against 1 process, a GPU against
// the CPU) differ by up to u·Σ|terms| in each sum, not u·|Σ terms|. Where a
// gradient's terms cancel, as the query and key projections' do under the
// near-uniform attention of a new model (softmax ignores a shift of a row's
// scores), the sum is far smaller than its terms, and Adam, whose step is
// about lr whatever the gradient's size, turns that rounding into a step
// difference. A bias that starts at 0 then differs by a share of lr per step
// while its own largest value stays a few lr: relative to itself, 1.3e-5
// after 10 float32 steps of the ViT on 2 ranks. The terms come from the same
// activations and backward signals as the rest of its group, so the group's
// largest value bounds their scale. A wrong split or weighting of the batch
// moves every tensor by a share of its own update and still fails.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "nn/checkpoint.h"

namespace {
// "parameters", or the buffer's name for an optimizer tensor
// ("optimizer.blocks.0.mlp.fc1.weight.exp_avg" is in group "exp_avg").
std::string group_of(const std::string& name) {
  if (name.rfind("optimizer.", 0) != 0) return "parameters";
  return name.substr(name.rfind('.') + 1);
}

// max|x - y| (y undefined: max|x|)
double max_abs(const qkv::Tensor& x, const qkv::Tensor& y = {}) {
  qkv::Tensor p = x.to(qkv::DType::Float64), q = y.defined() ? y.to(qkv::DType::Float64) : qkv::Tensor();
  double m = 0;
  for (int64_t i = 0; i < p.numel(); ++i)
    m = std::max(m, std::abs(p.data<double>()[i] - (q.defined() ? q.data<double>()[i] : 0.0)));
  return m;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace qkv;
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_checkpoints A B TOL\n");
    return 2;
  }
  try {
    io::TensorFile a = io::load_safetensors(argv[1]), b = io::load_safetensors(argv[2]);
    double tol = std::atof(argv[3]), worst = 0;
    std::map<std::string, double> scale;  // each group's largest |a|
    for (const auto& [name, x] : a.tensors)
      if (is_floating(x.dtype())) scale[group_of(name)] = std::max(scale[group_of(name)], max_abs(x));
    std::string worst_name;
    int compared = 0;
    for (const auto& [name, x] : a.tensors) {
      Tensor y = b.get(name);
      if (!y.defined() || y.shape() != x.shape() || y.dtype() != x.dtype()) {
        std::printf("FAIL: %s differs in presence, shape or dtype\n", name.c_str());
        return 1;
      }
      if (!is_floating(x.dtype())) continue;
      double diff = max_abs(x, y), s = scale[group_of(name)];
      double rel = s > 0 ? diff / s : diff;
      if (rel >= worst) worst = rel, worst_name = name;
      ++compared;
    }
    if (a.tensors.size() != b.tensors.size()) {
      std::printf("FAIL: %zu tensors against %zu\n", a.tensors.size(), b.tensors.size());
      return 1;
    }
    std::printf(
        "%s: %d tensors in %zu groups, worst difference %.3g of its group's largest value (%s), tolerance %.3g\n",
        worst <= tol ? "ok" : "FAIL", compared, scale.size(), worst, worst_name.c_str(), tol);
    return worst <= tol ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_checkpoints: %s\n", e.what());
    return 2;
  }
}
