#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

Tensor evaluate(const std::function<Tensor()>& f, const Replay& replay) {
  replay.restore();
  Tensor out = f();
  QKV_CHECK(out.dtype() == DType::Float64, "gradcheck: the function returned ", dtype_name(out.dtype()),
            "; gradients are checked in float64");
  return out;
}

// Σ f() ⊙ projection, accumulated in double.
double projected(const std::function<Tensor()>& f, const Tensor& projection, const Replay& replay) {
  Tensor out = evaluate(f, replay).to(Device::cpu());
  QKV_CHECK(out.shape() == projection.shape(), "gradcheck: the output's shape changed between evaluations");
  const double* y = out.data<double>();
  const double* r = projection.data<double>();
  double total = 0;
  for (int64_t i = 0; i < out.numel(); ++i) total += y[i] * r[i];
  return total;
}

// Element i (row-major) of a leaf on any device: a device's goes through a one-element copy.
std::vector<int64_t> unravel(const Shape& shape, int64_t i) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}

}  // namespace

GradcheckResult gradcheck_leaves(const std::function<Tensor()>& f,
                                 const std::vector<std::pair<std::string, Tensor>>& leaves,
                                 const GradcheckOptions& options) {
  for (const auto& [name, leaf] : leaves)
    QKV_CHECK(leaf.dtype() == DType::Float64 && leaf.is_leaf() && leaf.requires_grad(), "gradcheck: ", name, " ",
              shape_str(leaf.shape()), " must be a float64 leaf that requires grad, got ", dtype_name(leaf.dtype()));
  Replay replay(options.replay);
  for (const auto& [name, leaf] : leaves) leaf.zero_grad();

  // Analytic: one backward of the projected output.
  Tensor out = evaluate(f, replay);
  Generator gen(options.seed);
  Tensor projection = Tensor::randn(out.shape(), DType::Float64, &gen);
  if (out.requires_grad()) out.backward(projection.to(out.device()));

  GradcheckResult result;
  NoGradGuard no_grad;
  int64_t done = 0, total = 0;
  for (const auto& named : leaves)
    total += options.max_entries > 0 ? std::min(options.max_entries, named.second.numel()) : named.second.numel();
  for (const auto& named : leaves) {
    const Tensor& leaf = named.second;  // not a structured binding: clang cannot capture one with OpenMP on
    InputReport report;
    report.name = named.first;
    report.shape = leaf.shape();
    Tensor analytic = leaf.grad().defined() ? leaf.grad().to(Device::cpu()) : Tensor();
    // Leaves on a device are perturbed one element at a time through host copies.
    const bool host = leaf.device().is_cpu();
    auto get = [&](int64_t i) { return host ? leaf.data<double>()[i] : leaf.at(unravel(leaf.shape(), i)); };
    auto put = [&](int64_t i, double v) {
      if (host)
        leaf.data<double>()[i] = v;
      else
        leaf.set(unravel(leaf.shape(), i), v);
    };
    std::vector<int64_t> entries;
    for (int64_t i = 0; i < leaf.numel(); ++i) entries.push_back(i);
    if (options.max_entries > 0 && leaf.numel() > options.max_entries) {
      for (int64_t k = 0; k < options.max_entries; ++k)  // a partial Fisher-Yates shuffle
        std::swap(entries[k], entries[k + static_cast<int64_t>(gen.below(leaf.numel() - k))]);
      entries.resize(options.max_entries);
    }
    for (int64_t i : entries) {
      double saved = get(i);
      put(i, saved + options.eps);
      double plus = projected(f, projection, replay);
      put(i, saved - options.eps);
      double minus = projected(f, projection, replay);
      put(i, saved);
      double numeric = (plus - minus) / (2 * options.eps);
      double a = analytic.defined() ? analytic.data<double>()[i] : 0.0;
      double err = std::abs(a - numeric);
      const double tolerance = options.atol + options.rtol * std::abs(numeric);
      bool ok = err <= tolerance;  // false for NaN
      report.ok = report.ok && ok;
      report.max_tolerance_share = std::max(report.max_tolerance_share, err / tolerance);
      report.max_abs_error = std::max(report.max_abs_error, err);
      double scale = std::max(std::abs(a), std::abs(numeric));
      if (scale > 1e-8) report.max_rel_error = std::max(report.max_rel_error, err / scale), ++report.relative_entries;
      if (std::isnan(err)) report.max_abs_error = report.max_rel_error = report.max_tolerance_share = err;
      if (options.progress) options.progress(++done, total);
    }
    result.ok = result.ok && report.ok;
    result.inputs.push_back(report);
  }
  replay.restore();
  return result;
}

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  std::vector<Tensor> all;
  std::vector<std::pair<std::string, Tensor>> leaves;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    QKV_CHECK(t.dtype() != DType::Float32, "gradcheck: input ", k, " ", shape_str(t.shape()),
              " is float32; convert inputs to float64");
    Tensor leaf = t.to(t.dtype());  // a private copy: perturbing it leaves the caller's data alone
    if (t.dtype() == DType::Float64) leaves.emplace_back(cat("input ", k), leaf.requires_grad_());
    all.push_back(leaf);
  }
  return gradcheck_leaves([&] { return f(all); }, leaves, options);
}

std::string InputReport::relative_text() const {
  if (relative_entries == 0 && !std::isnan(max_rel_error)) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.3e", max_rel_error);
  return text;
}

std::string GradcheckResult::summary() const {
  std::ostringstream out;
  out.precision(3);
  for (const InputReport& r : inputs) {
    out << r.name << " " << shape_str(r.shape) << ": max abs err " << std::scientific << r.max_abs_error
        << ", max rel err " << r.relative_text() << (r.relative_text() == "n/a" ? " (every entry under 1e-8)" : "")
        << (r.ok ? "  ok" : "  FAILED") << "\n";
  }
  return out.str();
}

double GradcheckResult::worst_rel_error() const {
  double worst = 0;  // NaN, once seen, stays: std::max(NaN, x) is NaN
  for (const InputReport& r : inputs)
    worst = std::isnan(r.max_rel_error) ? r.max_rel_error : std::max(worst, r.max_rel_error);
  return worst;
}

}  // namespace qkv
