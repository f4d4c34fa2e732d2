// Walks the gradcheck registry: every differentiable op, several shapes and
// two random draws each, float64 central differences at atol 1e-6, rtol 1e-5.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "autograd/autograd.h"
#include "nn/gradcheck_cases.h"

using namespace qkv;
using Catch::Matchers::Contains;

namespace {
// nn's layers register their cases as any layer outside autograd does.
const bool nn_cases_registered = (nn::register_gradcheck_cases(), true);
}  // namespace

TEST_CASE("every registry case passes gradcheck in float64", "[gradcheck]") {
  int checked = 0;
  for (const GradcheckCase& c : gradcheck_registry()) {
    for (uint64_t seed : {1u, 2u}) {
      Generator gen(seed);
      GradcheckOptions options = c.options;
      REQUIRE(options.atol <= 1e-6);
      REQUIRE(options.rtol <= 1e-5);
      GradcheckResult result = gradcheck(c.fn, c.make_inputs(gen), options);
      INFO(c.op << " (" << c.label << "), seed " << seed << "\n" << result.summary());
      CHECK(result.ok);
      CHECK(!result.inputs.empty());
      ++checked;
    }
  }
  CHECK(checked >= 2 * 90);
}

TEST_CASE("the registry covers exactly the declared ops, each in several shapes", "[gradcheck]") {
  std::map<std::string, int> cases_per_op;
  for (const GradcheckCase& c : gradcheck_registry()) ++cases_per_op[c.op];
  std::vector<std::string> declared = declared_ops();
  for (const std::string& op : declared) {
    INFO("op " << op << " is declared but has " << cases_per_op[op] << " registry cases");
    CHECK(cases_per_op[op] >= 2);
  }
  std::set<std::string> declared_set(declared.begin(), declared.end());
  for (const auto& [op, count] : cases_per_op) {
    INFO("registry names op " << op << ", which the library does not declare");
    CHECK(declared_set.count(op) == 1);
  }
  // The ops the tensor/autograd issue asks for, by name: none may go missing.
  for (const char* op :
       {"add",        "sub",         "mul",    "div",    "add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar",
        "div_scalar", "rdiv_scalar", "neg",    "exp",    "log",        "sqrt",       "pow",         "tanh",
        "relu",       "sigmoid",     "abs",    "sum",    "mean",       "max",        "var",         "reshape",
        "transpose",  "permute",     "narrow", "slice",  "concat",     "stack",      "expand",      "index_select",
        "gather",     "masked_fill", "where",  "matmul", "softmax",    "log_softmax"}) {
    INFO("missing op " << op);
    CHECK(declared_set.count(op) == 1);
  }
}

TEST_CASE("gradcheck catches a wrong backward and a missing one", "[gradcheck]") {
  Generator gen(7);
  Tensor x = Tensor::randn({3, 4}, DType::Float64, &gen);
  // exp with a backward that forgets the factor exp(x): returns g instead of g·y.
  TensorFn wrong_exp = [](const std::vector<Tensor>& in) {
    Tensor y = exp(in[0].detach());
    record("exp", y, {in[0]}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
    return y;
  };
  GradcheckResult wrong = gradcheck(wrong_exp, {x});
  CHECK_FALSE(wrong.ok);
  CHECK(wrong.inputs.at(0).max_abs_error > 1e-2);
  CHECK_THAT(wrong.summary(), Contains("FAILED"));

  // A function that cuts its input out of the graph has zero analytic gradient.
  TensorFn detached = [](const std::vector<Tensor>& in) { return mul(in[0].detach(), in[0]); };
  CHECK_FALSE(gradcheck(detached, {x}).ok);

  // The same functions done right pass.
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x}).ok);
}

TEST_CASE("gradcheck replays the default generator for every evaluation", "[gradcheck]") {
  // f draws noise from the default generator each call: without replay the
  // central differences would see different noise on every evaluation.
  TensorFn noisy = [](const std::vector<Tensor>& in) {
    Tensor noise = Tensor::randn(in[0].shape(), DType::Float64);
    return mul(in[0], noise);
  };
  Tensor x = Tensor::randn({2, 3}, DType::Float64);
  CHECK(gradcheck(noisy, {x}).ok);
}

TEST_CASE("gradcheck says n/a, not 0, for a relative error it could not take", "[gradcheck]") {
  // y = a·0 + b: a's gradient is 0 everywhere (every entry under 1e-8), b's is not.
  Tensor a = Tensor::randn({3}, DType::Float64), b = Tensor::randn({3}, DType::Float64);
  GradcheckResult r = gradcheck([](const std::vector<Tensor>& in) { return add(mul(in[0], 0.0), in[1]); }, {a, b});
  REQUIRE(r.inputs.size() == 2);
  CHECK(r.inputs[0].relative_entries == 0);
  CHECK(r.inputs[1].relative_entries == 3);
  CHECK_THAT(r.summary(), Contains("input 0 [3]: max abs err 0.000e+00, max rel err n/a (every entry under 1e-8)"));
  CHECK(r.inputs[0].relative_text() == "n/a");
  CHECK(r.inputs[1].relative_text() != "n/a");
  const std::string summary = r.summary(), second = summary.substr(summary.find("input 1"));
  CHECK(second.find("n/a") == std::string::npos);
}

TEST_CASE("gradcheck rejects float32 inputs and outputs", "[gradcheck]") {
  Tensor x32 = Tensor::randn({2});
  CHECK_THROWS_WITH(gradcheck([](const std::vector<Tensor>& in) { return in[0]; }, {x32}), Contains("float32"));
  Tensor x64 = Tensor::randn({2}, DType::Float64);
  CHECK_THROWS_WITH(gradcheck([](const std::vector<Tensor>& in) { return in[0].to(DType::Float32); }, {x64}),
                    Contains("float64"));
}
