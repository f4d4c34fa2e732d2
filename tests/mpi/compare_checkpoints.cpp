// compare_checkpoints A B TOL: every floating tensor of two safetensors files
// (same names, same shapes) agrees to TOL: max|a - b| <= TOL * scale, where
// scale is the tensor's largest |a| for optimizer state, and for parameters
// trained by Adam or AdamW the larger of that and lr * steps (A's metadata).
// Prints the worst tensor; exits 1 when any differs (NaN where the other
// file has a number included), 2 when a file cannot be read.
//
// Why lr * steps for Adam's parameters: two runs that add the same float32
// terms in another order (2 ranks against 1 process, a GPU against the CPU)
// differ by up to u·Σ|terms| in each sum, not u·|Σ terms|. Where a gradient's
// terms cancel, as the query projection's do under the near-uniform attention
// of a new model (softmax ignores a shift of a row's scores), the sum's
// relative error has no bound, and Adam, whose step is about lr whatever the
// gradient's size, turns it into a difference of a share of lr per step. A
// bias that starts at 0 is then only a few lr in size: relative to itself the
// ViT's blocks.1.attn.q_proj.bias differed by 1.3e-5 after 10 steps on 2
// ranks, 3.2e-6 against lr * steps. Any parameter larger than lr * steps
// keeps its own scale, and optimizer state always does.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/checkpoint.h"

namespace {
// max|x - y|, NaN when one holds NaN where the other does not hold NaN too
double max_difference(const qkv::Tensor& x, const qkv::Tensor& y) {
  qkv::Tensor p = x.to(qkv::DType::Float64), q = y.to(qkv::DType::Float64);
  double m = 0;
  for (int64_t i = 0; i < p.numel(); ++i) {
    double a = p.data<double>()[i], b = q.data<double>()[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    double d = std::abs(a - b);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

double max_abs(const qkv::Tensor& x) { return max_difference(x, qkv::Tensor::zeros(x.shape(), x.dtype())); }

// lr * steps for a run of Adam or AdamW, else 0 (its settings and step as train records them)
double adam_reach(const std::map<std::string, std::string>& meta) {
  auto settings = meta.find("qkv.train"), step = meta.find("qkv.step");
  if (settings == meta.end() || step == meta.end()) return 0;
  nlohmann::json s = nlohmann::json::parse(settings->second);
  const std::string optimizer = s.value("optimizer", "");
  if (optimizer != "adam" && optimizer != "adamw") return 0;
  return std::stod(s.at("lr").get<std::string>()) * std::stod(step->second);
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
    double tol = std::atof(argv[3]), worst = 0, reach = adam_reach(a.metadata);
    std::string worst_name;
    int compared = 0;
    for (const auto& [name, x] : a.tensors) {
      Tensor y = b.get(name);
      if (!y.defined() || y.shape() != x.shape() || y.dtype() != x.dtype()) {
        std::printf("FAIL: %s differs in presence, shape or dtype\n", name.c_str());
        return 1;
      }
      if (!is_floating(x.dtype())) continue;
      const bool parameter = name.rfind("optimizer.", 0) != 0;
      double scale = std::max(max_abs(x), parameter ? reach : 0.0), diff = max_difference(x, y);
      double rel = scale > 0 ? diff / scale : diff;
      if (std::isnan(rel) || rel >= worst) worst = rel, worst_name = name;
      if (std::isnan(rel)) break;
      ++compared;
    }
    if (a.tensors.size() != b.tensors.size()) {
      std::printf("FAIL: %zu tensors against %zu\n", a.tensors.size(), b.tensors.size());
      return 1;
    }
    const bool ok = worst <= tol;  // false for NaN
    std::printf("%s: %d tensors, worst relative difference %.3g (%s), tolerance %.3g%s\n", ok ? "ok" : "FAIL", compared,
                worst, worst_name.c_str(), tol,
                reach > 0 ? cat(", parameters against at least lr * steps = ", reach).c_str() : "");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_checkpoints: %s\n", e.what());
    return 2;
  }
}
