// Optimizers, gradient clipping and schedules: first steps against values
// computed by hand from PyTorch's documented update rules, descent on a
// quadratic, and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "autograd/profile.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace qkv;
using namespace qkv::optim;
using Catch::Matchers::Contains;

namespace {
// Two steps on loss = ½Σp² (so g = p) from p = [1, -2]; returns p after them.
template <class Make> std::vector<double> two_steps(Make make, DType dtype = DType::Float64) {
  Tensor p = Tensor::from_vector<double>({1, -2}).to(dtype).requires_grad_();
  auto opt = make(NamedTensors{{"w", p}});
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    (sum(p * p) * 0.5).backward();
    opt.step();
  }
  return p.to_vector();
}

void check_values(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(tol));
}
}  // namespace

TEST_CASE("SGD matches hand-computed steps: plain, weight decay, momentum, dampening, Nesterov", "[optim]") {
  auto sgd = [](SGDOptions o) { return [o](NamedTensors p) { return SGD(p, o); }; };
  check_values(two_steps(sgd({0.1})), {0.81, -1.62});
  check_values(two_steps(sgd({0.1, 0, 0, 0.01})), {0.808201, -1.616402});
  check_values(two_steps(sgd({0.1, 0.9})), {0.72, -1.44});
  check_values(two_steps(sgd({0.1, 0.9, 0.1})), {0.729, -1.458});
  check_values(two_steps(sgd({0.1, 0.9, 0, 0.01, true})), {0.5712156100000001, -1.1424312200000002});
}

TEST_CASE("Adam and AdamW match hand-computed steps", "[optim]") {
  auto adam = [](double wd) {
    return [wd](NamedTensors p) {
      AdamOptions o;
      o.lr = 0.1, o.weight_decay = wd;
      return Adam(p, o);
    };
  };
  auto adamw = [](double wd) {
    return [wd](NamedTensors p) {
      AdamOptions o;
      o.lr = 0.1, o.weight_decay = wd;
      o.decays = nullptr;
      return AdamW(p, o);
    };
  };
  check_values(two_steps(adam(0)), {0.8004122297123382, -1.800166486621093});
  check_values(two_steps(adam(0.1)), {0.8004122295267845, -1.8001664865292035});
  check_values(two_steps(adamw(0.1)), {0.7815718569541611, -1.7614089510885826});
  // float32 parameters follow within float precision.
  check_values(two_steps(adamw(0.1), DType::Float32), {0.7815718569541611, -1.7614089510885826}, 1e-6);
}

// torch.optim.Adam keeps state['step'] per parameter and counts only the steps that gave it a gradient; a
// global count gave b's first update 0.744·lr instead of lr. The values are PyTorch 1.13's (float64).
TEST_CASE("Adam's bias correction counts each parameter's own updates, as torch's per-parameter step", "[optim]") {
  Tensor a = Tensor::from_vector<double>({1}).requires_grad_(), b = Tensor::from_vector<double>({1}).requires_grad_();
  Adam opt({{"a", a}, {"b", b}}, {.lr = 0.1});
  auto step = [&](const Tensor& loss) {
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  step(sum(a));  // b has no gradient: it sits this step out
  CHECK(opt.updates(0) == 1);
  CHECK(opt.updates(1) == 0);
  CHECK(opt.lagging_updates().empty());  // no state and no updates: what a file without counts means
  step(sum(a + b));
  step(sum(a + b * 3.0));
  CHECK(a.item() == Approx(0.7000000030000006).epsilon(1e-14));
  CHECK(b.item() == Approx(0.8082218895123323).epsilon(1e-14));
  CHECK(opt.lagging_updates() == std::map<std::string, int64_t>{{"b", 2}});

  // Restored with its counts, a copy takes the same next step; without them (a file from before the
  // counts), every parameter counts every step, as then.
  Tensor a2 = Tensor::from_vector<double>({a.item()}).requires_grad_(),
         b2 = Tensor::from_vector<double>({b.item()}).requires_grad_();
  Adam copy({{"a", a2}, {"b", b2}}, {.lr = 0.1});
  copy.load_state(opt.state(), opt.steps(), opt.lagging_updates());
  CHECK(copy.updates(1) == 2);
  step(sum(b));
  copy.zero_grad();
  sum(b2).backward();
  copy.step();
  CHECK(b2.item() == b.item());
  copy.load_state(opt.state(), opt.steps());
  CHECK(copy.updates(1) == 4);
  CHECK_THROWS_WITH(copy.load_state(opt.state(), 4, {{"c", 1}}),
                    Contains("update count of 'c', which is no parameter"));
  CHECK_THROWS_WITH(copy.load_state(opt.state(), 4, {{"b", 5}}), Contains("'b' took 5 updates in 4 steps"));
  // A parameter with state was updated at least once; one without, never.
  CHECK_THROWS_WITH(copy.load_state(opt.state(), 4, {{"b", 0}}), Contains("'b' took 0 updates in 4 steps, with state"));
  CHECK_THROWS_WITH(copy.load_state({}, 4, {{"b", 2}}), Contains("'b' took 2 updates in 4 steps, without state"));
  CHECK(copy.updates(1) == 4);  // a refused state changes nothing
}

TEST_CASE("zero_grad(false) keeps zeros, as torch 1.13's default: a parameter a step leaves out still moves",
          "[optim]") {
  // torch 1.13, float64: a [0.5, -1, 2] and b [1.5, 0.25], loss Σ a·G(t, 0) + Σ b·G(t, 1) over 5 steps,
  // b left out of step 2, G(t, k)_i = sin(1.1t + 0.7i + 2.3k)·(k + 1).
  auto g = [](int t, int k, int n) {
    std::vector<double> v(n);
    for (int i = 0; i < n; ++i) v[i] = std::sin(1.1 * t + 0.7 * i + 2.3 * k) * (k + 1);
    return Tensor::from_vector<double>(v);
  };
  auto run = [&](bool adam, bool set_to_none) {
    Tensor a = Tensor::from_vector<double>({0.5, -1.0, 2.0}).requires_grad_();
    Tensor b = Tensor::from_vector<double>({1.5, 0.25}).requires_grad_();
    NamedTensors params{{"a", a}, {"b", b}};
    std::unique_ptr<Optimizer> opt;
    if (adam)
      opt = std::make_unique<Adam>(params, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    else
      opt = std::make_unique<SGD>(params, SGDOptions{0.1, 0.9});
    for (int t = 0; t < 5; ++t) {
      opt->zero_grad(set_to_none);
      Tensor loss = sum(a * g(t, 0, 3));
      if (t != 2) loss = loss + sum(b * g(t, 1, 2));
      loss.backward();
      opt->step();
    }
    return b.to_vector();
  };
  check_values(run(false, false), {1.2239250253652394, 0.5110999866425305});  // set_to_none=False
  check_values(run(false, true), {1.284518570631557, 0.4103129513069554});    // set_to_none=True (torch 2's default)
  check_values(run(true, false), {1.4787499141116636, 0.25213758666149355});
  check_values(run(true, true), {1.4831726324881795, 0.24863024709481232});
  Tensor never = Tensor::ones({2}).requires_grad_();
  never.zero_grad(false);
  CHECK_FALSE(never.grad().defined());  // no gradient yet: none either way, as torch
}

TEST_CASE("an optimizer refuses a tensor given twice, and buffers that no longer fit their parameter",
          "[optim][errors]") {
  Tensor a = Tensor::ones({2}).requires_grad_(), b = Tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH(SGD({{"a", a}, {"b", a}}, {0.1}), Contains("parameter 'b' is a tensor already given under another "
                                                               "name: it would be stepped twice"));
  CHECK_THROWS_WITH(SGD({{"a", a}, {"a", b}}, {0.1}), Contains("parameter name 'a' given twice"));
  // assign_ after the buffers were made: Adam's update ran over the new size through the old buffers.
  Adam adam({{"a", a}}, {.lr = 0.1});
  sum(a).backward();
  adam.step();
  a.assign_(Tensor::ones({8}));
  sum(a).backward();
  CHECK_THROWS_WITH(adam.step(), Contains("optimizer: parameter 'a' is now float32 [8] on cpu but its exp_avg is "
                                          "float32 [2] on cpu: it changed after the optimizer was made"));
  CHECK(adam.steps() == 1);  // the refused step counted nothing
  CHECK(adam.updates(0) == 1);
}

TEST_CASE("an unset weight decay is torch.optim's default: 0 for Adam, 0.01 for AdamW", "[optim]") {
  auto decay = [](const Optimizer& opt) { return opt.hyperparameters().at("weight_decay"); };
  NamedTensors params{{"w", Tensor::ones({2, 2}, DType::Float64).requires_grad_()}};
  CHECK(decay(Adam(params, {.lr = 0.1})) == "0");
  CHECK(decay(AdamW(params, {.lr = 0.1})) == "0.01");
  CHECK(decay(AdamW(params, {.lr = 0.1, .weight_decay = 0})) == "0");
  // The decay acts: a zero gradient moves w only by lr·wd·w.
  AdamW opt(params, {.lr = 0.1});
  sum(params[0].second * 0.0).backward();
  opt.step();
  CHECK(params[0].second.to_vector() == std::vector<double>(4, 1 - 0.1 * 0.01));
  CHECK_THROWS_WITH(Adam(params, {.weight_decay = -1}),
                    Catch::Matchers::Contains("adam: eps and weight_decay must be >= 0"));
}

TEST_CASE("AdamW leaves biases and LayerNorm parameters undecayed by default", "[optim]") {
  nn::Linear lin(3, 2);
  nn::LayerNorm ln(2);
  NamedTensors params = lin.named_parameters();
  for (auto& p : ln.named_parameters()) params.emplace_back("ln." + p.first, p.second);
  std::vector<std::vector<double>> before;
  for (auto& [n, p] : params) before.push_back(p.to_vector());
  AdamOptions o;
  o.lr = 0.1, o.weight_decay = 0.5;
  AdamW opt(params, o);
  for (auto& [n, p] : params) sum(p * 0.0).backward();  // zero gradients: only decay can move a parameter
  opt.step();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    bool decayed = params[i].second.to_vector() != before[i];
    CHECK(decayed == (params[i].first == "weight"));
  }
}

TEST_CASE("every optimizer decreases a quadratic", "[optim]") {
  auto run = [](auto make) {
    Generator gen(1);
    Tensor target = Tensor::randn({20}, DType::Float64, &gen);
    Tensor p = Tensor::zeros({20}, DType::Float64).requires_grad_();
    auto opt = make(NamedTensors{{"p", p}});
    auto loss = [&] { return sum(pow(p - target, 2)); };
    double start = loss().item();
    for (int i = 0; i < 200; ++i) {
      opt.zero_grad();
      loss().backward();
      opt.step();
    }
    return loss().item() / start;
  };
  CHECK(run([](NamedTensors p) { return SGD(p, {0.05}); }) < 1e-6);
  CHECK(run([](NamedTensors p) { return SGD(p, {0.02, 0.9, 0, 0, true}); }) < 1e-6);
  CHECK(run([](NamedTensors p) {
          AdamOptions o;
          o.lr = 0.05;
          return Adam(p, o);
        }) < 1e-3);
  CHECK(run([](NamedTensors p) {
          AdamOptions o;
          o.lr = 0.05, o.weight_decay = 0.01;
          o.decays = nullptr;
          return AdamW(p, o);
        }) < 1e-2);
}

TEST_CASE("clip_grad_norm returns the norm before clipping and scales to max_norm", "[optim]") {
  Tensor a = Tensor::from_vector<double>({3, 0}).requires_grad_(),
         b = Tensor::from_vector<double>({4}).requires_grad_();
  (sum(a * a.detach()) + sum(b * b.detach())).backward();  // grads: a -> [3, 0], b -> [4]
  NamedTensors params{{"a", a}, {"b", b}};
  CHECK(clip_grad_norm(params, 10) == Approx(5));  // below the limit: unchanged
  CHECK(a.grad().at({0}) == 3);
  CHECK(clip_grad_norm(params, 1) == Approx(5));
  CHECK(a.grad().at({0}) == Approx(3 / (5 + 1e-6)));
  CHECK(b.grad().at({0}) == Approx(4 / (5 + 1e-6)));
  CHECK_THROWS_WITH(clip_grad_norm(params, -1), Contains("max_norm must be >= 0"));
  CHECK(clip_grad_norm(params, INFINITY) == Approx(1));  // no limit: unchanged
  CHECK(a.grad().at({0}) == Approx(3 / (5 + 1e-6)));
  CHECK(clip_grad_norm(params, 0) == Approx(1));  // as torch: max_norm 0 zeroes the gradients
  CHECK(a.grad().to_vector() == std::vector<double>{0, 0});
  CHECK(b.grad().to_vector() == std::vector<double>{0});
  // A NaN in one gradient: torch returns NaN and scales every gradient by NaN; unscaled ones would hide it.
  a.zero_grad(), b.zero_grad();
  (sum(a * Tensor::from_vector<double>({std::nan(""), 1})) + sum(b * 2)).backward();
  CHECK(std::isnan(clip_grad_norm(params, 1)));
  CHECK(std::isnan(b.grad().item()));
}

TEST_CASE("clip_factor then step(factor) is clip_grad_norm then step, to the bit", "[optim]") {
  // Parameters of 3 and 10,000 elements (the large one in several chunks of the fused scale and update),
  // float32 and float64, SGD with momentum and AdamW, two steps; the gradients after each step too.
  for (DType dtype : {DType::Float32, DType::Float64})
    for (const std::string kind : {"sgd", "adamw"}) {
      auto run = [&](bool fused) {
        Generator gen(4);
        NamedTensors params{{"a", Tensor::randn({3}, DType::Float32, &gen).to(dtype).requires_grad_()},
                            {"b", Tensor::randn({100, 100}, DType::Float32, &gen).to(dtype).requires_grad_()}};
        std::unique_ptr<Optimizer> opt;
        if (kind == "sgd")
          opt = std::make_unique<SGD>(params, SGDOptions{.lr = 0.1, .momentum = 0.9});
        else
          opt = std::make_unique<AdamW>(params, AdamOptions{.lr = 0.01});
        std::vector<double> seen;
        for (int step = 0; step < 2; ++step) {
          opt->zero_grad();
          (sum(params[0].second * 3.0) + sum(params[1].second * params[1].second)).backward();
          if (fused) {
            opt->step(clip_factor(params, 1.0).factor);
          } else {
            clip_grad_norm(params, 1.0);
            opt->step();
          }
          for (const auto& [name, p] : params)
            for (const Tensor& t : {p, p.grad()}) {
              std::vector<double> v = t.to_vector();
              seen.insert(seen.end(), v.begin(), v.end());
            }
        }
        return seen;
      };
      INFO(kind << " " << dtype_name(dtype));
      CHECK(run(true) == run(false));
    }
  NamedTensors none;
  CHECK(clip_factor(none, 1.0).factor == 1.0);
}

TEST_CASE("parallel_for_all covers every item of every loop once, for any thread count", "[optim][threads]") {
  const std::vector<int64_t> sizes = {0, 1, kLoopChunk, kLoopChunk + 1, 3 * kLoopChunk - 5, 7};
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<std::vector<int>> seen(sizes.size());
    std::vector<ItemLoop> loops;
    for (size_t i = 0; i < sizes.size(); ++i) {
      seen[i].assign(sizes[i], 0);
      loops.push_back({sizes[i], [&seen, i](int64_t begin, int64_t end) {
                         for (int64_t k = begin; k < end; ++k) ++seen[i][k];
                       }});
    }
    parallel_for_all(loops, 4);
    set_num_threads(0);
    bool once = true;
    for (const auto& v : seen) once = once && std::all_of(v.begin(), v.end(), [](int c) { return c == 1; });
    CHECK(once);
  }
}

TEST_CASE(
    "an optimizer step and clipping over many parameters keep their bits for any thread count, in one region each",
    "[optim][threads]") {
  // Parameters around a chunk of kLoopChunk elements, the tiny ones among them, float32 and float64.
  const std::vector<Shape> shapes = {{3}, {kLoopChunk}, {kLoopChunk + 5}, {7, 11}, {2, kLoopChunk + 1}, {1}};
  auto train = [&](int threads, DType dtype, bool adam) {
    set_num_threads(threads);
    Generator gen(11);
    NamedTensors params;
    for (size_t i = 0; i < shapes.size(); ++i)
      params.emplace_back("p" + std::to_string(i), Tensor::randn(shapes[i], dtype, &gen).requires_grad_());
    std::unique_ptr<Optimizer> opt;
    if (adam)
      opt = std::make_unique<AdamW>(params, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    else
      opt = std::make_unique<SGD>(params, SGDOptions{.lr = 0.01, .momentum = 0.9, .nesterov = true});
    std::vector<double> norms;
    for (int step = 0; step < 3; ++step) {
      opt->zero_grad();
      Tensor loss = Tensor::zeros({}, dtype);
      for (auto& [name, p] : params) loss = loss + sum(tanh(p) * p * 3.0);
      loss.backward();
      norms.push_back(clip_grad_norm(params, 1.0));  // clips: the gradients' norm is far above 1
      opt->step();
    }
    set_num_threads(0);
    for (auto& [name, p] : params) {
      std::vector<double> v = p.to_vector();
      norms.insert(norms.end(), v.begin(), v.end());
    }
    return norms;
  };
  for (DType dtype : {DType::Float32, DType::Float64})
    for (bool adam : {true, false}) {
      std::vector<double> one = train(1, dtype, adam);
      bool same = true;
      for (int threads : {2, 3, 16}) same = same && train(threads, dtype, adam) == one;
      CHECK(same);
    }
  // One region for all the parameters' updates, one for the squares and one for the scaling.
  Generator gen(2);
  NamedTensors params;
  for (size_t i = 0; i < shapes.size(); ++i)
    params.emplace_back("p" + std::to_string(i), Tensor::randn(shapes[i], DType::Float32, &gen).requires_grad_());
  for (auto& [name, p] : params) sum(p * p * 10.0).backward();
  AdamW opt(params, AdamOptions{});
  profile::start();
  clip_grad_norm(params, 1.0);
  opt.step();
  std::vector<profile::Region> regions = profile::stop();
  int own = 0;  // the optimizer's (the rest: its buffers' zero fills, on their first step)
  for (const profile::Region& r : regions)
    if (r.name.find("optimizer.cpp") != std::string::npos) {
      ++own;
      CHECK(r.calls == 1);
    }
  CHECK(own == 3);
}

TEST_CASE("schedules give the documented rates", "[optim][schedule]") {
  CHECK(ConstantLR(0.1).lr(1000) == 0.1);
  StepLR step(1.0, 10, 0.5);
  CHECK(step.lr(9) == 1.0);
  CHECK(step.lr(10) == 0.5);
  CHECK(step.lr(25) == 0.25);
  CosineLR cosine(1.0, 10, 110, 0.1);
  CHECK(cosine.lr(0) == Approx(0.1));  // (0 + 1) / 10 of the peak
  CHECK(cosine.lr(9) == Approx(1.0));
  CHECK(cosine.lr(10) == Approx(1.0));
  CHECK(cosine.lr(60) == Approx(0.55));  // half way down the cosine
  CHECK(cosine.lr(110) == Approx(0.1));
  CHECK(cosine.lr(5000) == Approx(0.1));
  CHECK_THROWS_WITH(CosineLR(1.0, 20, 10), Contains("warmup <= total"));
  CHECK_THROWS_WITH(StepLR(1.0, 0, 0.5), Contains("step_size must be > 0"));
  CHECK_THROWS_WITH(ConstantLR(-1), Contains("learning rate"));
  CHECK_THROWS_WITH(CosineLR(1.0, 10, 100).lr(-5), Contains("CosineLR: step -5 is negative"));  // it gave -2 lr
  CHECK_THROWS_WITH(StepLR(1.0, 10, 0.5).lr(-1), Contains("StepLR: step -1 is negative"));
}

TEST_CASE("optimizer errors", "[optim][errors]") {
  Tensor plain = Tensor::ones({2});
  CHECK_THROWS_WITH(SGD({{"w", plain}}, {0.1}), Contains("parameter 'w' must be a float tensor that requires grad"));
  Tensor w = Tensor::ones({2}).requires_grad_();
  CHECK_THROWS_WITH(SGD({{"w", w}}, {0.1, 0, 0, 0, true}), Contains("Nesterov"));
  AdamOptions bad;
  bad.beta1 = 1.0;
  CHECK_THROWS_WITH(Adam({{"w", w}}, bad), Contains("adam: betas must be in [0, 1)"));
  SGD opt({{"w", w}}, {0.1, 0.9});
  CHECK_THROWS_WITH(opt.set_lr(std::nan("")), Contains("learning rate must be finite"));
  CHECK_THROWS_WITH(opt.load_state({{"v.momentum_buffer", Tensor::ones({2})}}, 1), Contains("belongs to no parameter"));
  CHECK_THROWS_WITH(opt.load_state({{"w.momentum_buffer", Tensor::ones({3})}}, 1), Contains("[3]"));
  // A file's state is checked like its weights: a NaN moment or a negative second moment would make the
  // first resumed step NaN, and a buffer missing or unknown would restart or carry state in silence.
  CHECK_THROWS_WITH(opt.load_state({{"w.exp_avg", Tensor::ones({2})}}, 1), Contains("sgd keeps no 'exp_avg'"));
  CHECK_THROWS_WITH(opt.load_state({{"w.momentum_buffer", Tensor::from_vector<float>({1, NAN})}}, 1),
                    Contains("optimizer state 'w.momentum_buffer' holds nan at element 1"));
  AdamW adam({{"w", w}}, {});
  const Tensor ones = Tensor::ones({2});
  CHECK_THROWS_WITH(adam.load_state({{"w.exp_avg", ones}, {"w.exp_avg_sq", Tensor::from_vector<float>({1, -1})}}, 1),
                    Contains("'w.exp_avg_sq' holds -1 at element 1, which is never negative"));
  CHECK_THROWS_WITH(adam.load_state({{"w.exp_avg", ones}}, 1), Contains("'w' has 1 of adamw's 2 buffers"));
  CHECK_THROWS_WITH(adam.load_state({{"w.exp_avg", ones}, {"w.exp_avg_sq", ones}, {"w.bogus", ones}}, 1),
                    Contains("adamw keeps no 'bogus'"));
  adam.load_state({{"w.exp_avg", ones}, {"w.exp_avg_sq", ones}}, 7);
  CHECK(adam.updates(0) == 7);
  adam.load_state({}, 7);  // no state: never updated
  CHECK(adam.updates(0) == 0);
}
