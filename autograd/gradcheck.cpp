#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/engine.h"

namespace qkv {

namespace {

struct Replay {
  std::vector<Generator*> generators;
  std::vector<Generator::State> states;
  explicit Replay(const std::vector<Generator*>& gens) : generators(gens) {
    for (Generator* g : gens) states.push_back(g->state());
  }
  void restore() const {
    for (size_t i = 0; i < generators.size(); ++i) generators[i]->set_state(states[i]);
  }
};

// Σ f(inputs) ⊙ projection, accumulated in double.
double projected(const TensorFn& f, const std::vector<Tensor>& inputs, const Tensor& projection, const Replay& replay) {
  replay.restore();
  Tensor out = f(inputs);
  check(out.dtype() == DType::Float64, "gradcheck: the function returned ", dtype_name(out.dtype()),
        "; gradients are checked in float64");
  const double* y = out.data<double>();
  const double* r = projection.data<double>();
  double total = 0;
  for (int64_t i = 0; i < out.numel(); ++i) total += y[i] * r[i];
  return total;
}

}  // namespace

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  Replay replay(options.replay);
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.to(t.dtype());
    if (t.dtype() == DType::Float64) leaf.requires_grad_();
    check(t.dtype() != DType::Float32, "gradcheck: input of shape ", shape_str(t.shape()),
          " is float32; convert inputs to float64");
    leaves.push_back(leaf);
  }

  // Analytic: one backward of the projected output.
  replay.restore();
  Tensor out = f(leaves);
  check(out.dtype() == DType::Float64, "gradcheck: the function returned ", dtype_name(out.dtype()),
        "; gradients are checked in float64");
  Generator gen(options.seed);
  Tensor projection = Tensor::randn(out.shape(), DType::Float64, &gen);
  if (out.requires_grad()) out.backward(projection);

  GradcheckResult result;
  NoGradGuard no_grad;
  for (size_t k = 0; k < leaves.size(); ++k) {
    if (leaves[k].dtype() != DType::Float64) continue;
    InputReport report;
    report.index = static_cast<int>(k);
    report.shape = leaves[k].shape();
    Tensor analytic = leaves[k].grad();
    double* x = leaves[k].data<double>();
    for (int64_t i = 0; i < leaves[k].numel(); ++i) {
      double saved = x[i];
      x[i] = saved + options.eps;
      double plus = projected(f, leaves, projection, replay);
      x[i] = saved - options.eps;
      double minus = projected(f, leaves, projection, replay);
      x[i] = saved;
      double numeric = (plus - minus) / (2 * options.eps);
      double a = analytic.defined() ? analytic.data<double>()[i] : 0.0;
      double err = std::abs(a - numeric);
      bool ok = err <= options.atol + options.rtol * std::abs(numeric);  // false for NaN
      report.ok = report.ok && ok;
      report.max_abs_error = std::max(report.max_abs_error, err);
      double scale = std::max(std::abs(a), std::abs(numeric));
      if (scale > 1e-8) report.max_rel_error = std::max(report.max_rel_error, err / scale);
      if (std::isnan(err)) report.max_abs_error = report.max_rel_error = err;
    }
    result.ok = result.ok && report.ok;
    result.inputs.push_back(report);
  }
  replay.restore();
  return result;
}

std::string GradcheckResult::summary() const {
  std::ostringstream out;
  out.precision(3);
  for (const InputReport& r : inputs)
    out << "input " << r.index << " " << shape_str(r.shape) << ": max abs err " << std::scientific << r.max_abs_error
        << ", max rel err " << r.max_rel_error << (r.ok ? "  ok" : "  FAILED") << "\n";
  return out.str();
}

}  // namespace qkv
