// Numerical gradient checking in float64: every analytic gradient against
// central differences.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/generator.h"
#include "autograd/tensor.h"

namespace qkv {

/// A function of tensors to check; it must return a float64 tensor.
using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-6;  // an element passes when |analytic - numeric| <= atol + rtol·|numeric|
  double rtol = 1e-5;
  uint64_t seed = 1234;  // seeds the random projection of the output (and the entries picked below)
  /// 0 checks every entry of every input; n > 0 checks n entries per input,
  /// chosen at random (for models too large to perturb every weight).
  int64_t max_entries = 0;
  /// Generators restored to their starting state before every evaluation of
  /// the function, so dropout masks and other draws replay identically.
  std::vector<Generator*> replay = {&default_generator()};
  /// Optional: called after each entry is checked with the entries done and
  /// the total over all inputs (a long check's progress line).
  std::function<void(int64_t done, int64_t total)> progress;
};

struct InputReport {
  std::string name;  // "input 0", or a parameter's dotted name
  Shape shape;
  double max_abs_error = 0;      // max |analytic - numeric|
  double max_rel_error = 0;      // max |analytic - numeric| / max(|analytic|, |numeric|), over entries above 1e-8
  int64_t relative_entries = 0;  // the entries above 1e-8: with none, max_rel_error measured nothing ("n/a")
  /// max |analytic - numeric| / (atol + rtol·|numeric|): the entry nearest its tolerance; ok means at most 1.
  double max_tolerance_share = 0;
  /// max_rel_error as "1.234e-05", or "n/a" where relative_entries is 0 (not 0: a perfect score).
  std::string relative_text() const;
  bool ok = true;
};

struct GradcheckResult {
  bool ok = true;
  std::vector<InputReport> inputs;  // one per float64 input
  /// One line per input: name, shape, worst errors and verdict.
  std::string summary() const;
  /// The largest max_rel_error over all inputs.
  double worst_rel_error() const;
};

/// Checks d(sum(f(inputs) ⊙ R))/d input for a fixed random R against central
/// differences, element by element, for every float64 input (int64 and bool
/// inputs pass through unchanged). A random projection sees every Jacobian
/// entry, as PyTorch's fast gradcheck does, at the cost of one backward.
GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

/// The same check for a function of tensors it reaches by itself (a model's
/// parameters): each named leaf must be float64 and require grad; its data is
/// perturbed in place and restored.
GradcheckResult gradcheck_leaves(const std::function<Tensor()>& f,
                                 const std::vector<std::pair<std::string, Tensor>>& leaves,
                                 const GradcheckOptions& options = {});

}  // namespace qkv
