#include "nn/gradcheck_cases.h"

#include "autograd/ops/elementwise.h"
#include "nn/dropout.h"
#include "nn/feed_forward.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "nn/position.h"

namespace qkv::nn {

namespace {
constexpr DType F64 = DType::Float64;
using Inputs = std::vector<Tensor>;
Tensor normal(Generator& g, const Shape& s) { return Tensor::randn(s, F64, &g); }
using AddCase = std::function<void(std::string, std::string, std::function<Inputs(Generator&)>, TensorFn)>;

void add_loss_cases(const AddCase& add_case) {
  auto targets = [](std::vector<int64_t> t, Shape s) { return Tensor::from_vector(t, s); };
  add_case(
      "cross_entropy", "mean, [4, 5] with one ignored target",
      [targets](Generator& g) {
        return Inputs{normal(g, {4, 5}), targets({1, -100, 4, 0}, {4})};
      },
      [](const Inputs& x) { return cross_entropy(x[0], x[1]); });
  add_case(
      "cross_entropy", "sum, [2, 3, 4]",
      [targets](Generator& g) {
        return Inputs{normal(g, {2, 3, 4}), targets({0, 3, 3, 1, 2, 0}, {2, 3})};
      },
      [](const Inputs& x) { return cross_entropy(x[0], x[1], -100, Reduction::Sum); });
  add_case(
      "cross_entropy", "ignore_index 0",
      [targets](Generator& g) {
        return Inputs{normal(g, {3, 4}), targets({0, 2, 3}, {3})};
      },
      [](const Inputs& x) { return cross_entropy(x[0], x[1], 0); });
  add_case(
      "cross_entropy", "mean, [11, 70]: a device's rows in two blocks, 70 classes over 32 lanes, one ignored",
      [targets](Generator& g) {
        return Inputs{normal(g, {11, 70}), targets({0, 69, 33, 32, -100, 5, 64, 1, 31, 40, 2}, {11})};
      },
      [](const Inputs& x) { return cross_entropy(x[0], x[1]); });
  add_case(
      "linear_cross_entropy", "mean, x [2, 3, 4], weight [6, 4], one ignored target",
      [targets](Generator& g) {
        return Inputs{normal(g, {2, 3, 4}), normal(g, {6, 4}), targets({5, 0, -100, 2, 2, 1}, {2, 3})};
      },
      [](const Inputs& x) { return linear_cross_entropy(x[0], x[1], x[2]); });
  add_case(
      "linear_cross_entropy", "sum, in blocks of 2 rows (12 logits at most), the gradient made blockwise",
      [targets](Generator& g) {
        return Inputs{normal(g, {5, 3}), normal(g, {6, 3}), targets({1, 5, 0, 3, 3}, {5})};
      },
      [](const Inputs& x) { return linear_cross_entropy(x[0], x[1], x[2], -100, Reduction::Sum, 12); });
}

// The named parts' ops (nn/parts.h): RMSNorm, SwiGLU and rotary embeddings.
void add_part_cases(const AddCase& add_case) {
  add_case(
      "rms_norm", "weight, [2, 3, 5]",
      [](Generator& g) {
        return Inputs{normal(g, {2, 3, 5}), normal(g, {5})};
      },
      [](const Inputs& x) { return rms_norm(x[0], x[1]); });
  add_case(
      "rms_norm", "no weight, [4, 6], eps 0.1",
      [](Generator& g) {
        return Inputs{normal(g, {4, 6})};
      },
      [](const Inputs& x) { return rms_norm(x[0], Tensor(), 0.1); });
  add_case(
      "swiglu", "[3, 4] of both signs",
      [](Generator& g) {
        return Inputs{mul(normal(g, {3, 4}), 3.0), normal(g, {3, 4})};
      },
      [](const Inputs& x) { return swiglu(x[0], x[1]); });
  add_case(
      "swiglu", "[2, 3, 5], the gate used twice (as up too)",
      [](Generator& g) {
        return Inputs{normal(g, {2, 3, 5})};
      },
      [](const Inputs& x) { return swiglu(x[0], x[0]); });

  add_case(
      "rope", "[2, 5, 3, 6]",
      [](Generator& g) {
        return Inputs{normal(g, {2, 5, 3, 6})};
      },
      [](const Inputs& x) { return rope(x[0]); });
  add_case(
      "rope", "[1, 4, 2, 8] from position 100, base 500",
      [](Generator& g) {
        return Inputs{normal(g, {1, 4, 2, 8})};
      },
      [](const Inputs& x) { return rope(x[0], 100, 500); });
}
}  // namespace

std::vector<GradcheckCase> gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  AddCase add_case = [&](std::string op, std::string label, std::function<Inputs(Generator&)> make, TensorFn fn) {
    cases.push_back({std::move(op), std::move(label), std::move(make), std::move(fn)});
  };

  add_case(
      "layer_norm", "affine, [2, 3, 5]",
      [](Generator& g) {
        return Inputs{normal(g, {2, 3, 5}), normal(g, {5}), normal(g, {5})};
      },
      [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); });
  add_case(
      "layer_norm", "no affine, [4, 6], eps 0.1",
      [](Generator& g) {
        return Inputs{normal(g, {4, 6})};
      },
      [](const Inputs& x) { return layer_norm(x[0], Tensor(), Tensor(), 0.1); });
  add_case(
      "layer_norm", "weight only, [3, 4]",
      [](Generator& g) {
        return Inputs{normal(g, {3, 4}), normal(g, {4})};
      },
      [](const Inputs& x) { return layer_norm(x[0], x[1], Tensor()); });
  add_case(
      "layer_norm", "affine, [3, 30, 40]: a device's weight and bias sums over two tiles of columns, 90 rows",
      [](Generator& g) {
        return Inputs{normal(g, {3, 30, 40}), normal(g, {40}), normal(g, {40})};
      },
      [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); });

  // Masks replay: gradcheck restores the default generator before every evaluation.
  add_case(
      "dropout", "p = 0.3, [4, 5]",
      [](Generator& g) {
        return Inputs{normal(g, {4, 5})};
      },
      [](const Inputs& x) { return dropout(x[0], 0.3); });
  add_case(
      "dropout", "p = 0.5 then tanh, [2, 3, 4]",
      [](Generator& g) {
        return Inputs{normal(g, {2, 3, 4})};
      },
      [](const Inputs& x) { return dropout(x[0], 0.5); });
  add_case(
      "dropout", "eval mode is the identity",
      [](Generator& g) {
        return Inputs{normal(g, {3, 3})};
      },
      [](const Inputs& x) { return dropout(x[0], 0.5, false); });

  add_loss_cases(add_case);
  add_part_cases(add_case);
  return cases;
}

void register_gradcheck_cases() {
  static const bool registered = [] {
    for (GradcheckCase& c : gradcheck_cases()) register_gradcheck_case(std::move(c));
    return true;
  }();
  (void)registered;
}

}  // namespace qkv::nn
