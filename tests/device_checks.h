// Checks that a device computes what the CPU computes, written once for two
// runners: tests/test_device.cpp runs them on the stand-in device (host
// memory, the .cu kernels compiled as C++ loops) in every CPU build, and
// tests/cuda/test_cuda.cpp runs them on a real GPU. Each compares values
// within 1e-12 in float64 (1e-5 relative in float32) and, where it says so,
// passes the float64 gradient check with the ops on the device.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops/kernel.h"
#include "nn/gradcheck_cases.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace qkv::device_checks {

inline std::vector<Tensor> on_device(const std::vector<Tensor>& xs, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.defined() ? x.to(d) : x);
  return out;
}

/// max|got − want| <= tol · max(1, max|want|): the error relative to the value's scale.
inline void expect_close(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  std::vector<double> a = want.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    double d = std::abs(a[i] - b[i]);
    worst = d > worst || std::isnan(d) ? d : worst;
    scale = std::max(scale, std::abs(a[i]));
  }
  INFO(what << ": worst difference " << worst << ", scale " << scale << ", tolerance " << tol);
  CHECK(worst <= tol * scale);
}

/// Every gradcheck registry case with its ops on `d`: the CPU's value to
/// 1e-12, and the float64 gradient check (inputs cross over with the
/// differentiable to(Device), so central differences perturb them on the host).
inline void registry_matches_cpu(Device d) {
  static const bool registered = (nn::register_gradcheck_cases(), true);
  REQUIRE(registered);
  int checked = 0;
  for (const GradcheckCase& c : gradcheck_registry()) {
    INFO(c.op << " (" << c.label << ")");
    Generator gen(1);
    std::vector<Tensor> inputs = c.make_inputs(gen);
    try {
      Generator::State seed = default_generator().state();  // dropout draws the same mask for both
      Tensor want = c.fn(inputs);
      default_generator().set_state(seed);
      Tensor got = c.fn(on_device(inputs, d));
      CHECK(got.device() == (c.op == "to_device" ? Device::cpu() : d));  // to_device's cases end on the CPU
      std::vector<double> a = want.to_vector(), b = got.to_vector();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i)
        if (!(std::isnan(a[i]) && std::isnan(b[i]))) CHECK(std::abs(a[i] - b[i]) <= 1e-12 * (1 + std::abs(a[i])));
      TensorFn there = [&c, d](const std::vector<Tensor>& xs) { return c.fn(on_device(xs, d)).to(Device::cpu()); };
      GradcheckResult result = gradcheck(there, inputs, c.options);
      INFO(result.summary());
      CHECK(result.ok);
      ++checked;
    } catch (const Error& e) {
      // A fault in a kernel ("CUDA: ...", "cuBLAS: ...") leaves the device
      // unusable: every case after it would fail alike, so the first ends the test.
      const std::string what = e.what();
      if (what.rfind("CUDA: ", 0) == 0 || what.rfind("cuBLAS: ", 0) == 0) FAIL(what);
      FAIL_CHECK(e.what());  // an op without a device kernel says so here
    }
  }
  CHECK(checked == static_cast<int>(gradcheck_registry().size()));
}

/// SGD (plain; momentum, Nesterov and weight decay), Adam and AdamW, three
/// steps each with clip_grad_norm clipping: parameters, norms and state.
inline void optimizers_match_cpu(Device d) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(io::NamedTensors)>;
  std::vector<std::pair<std::string, Make>> optimizers = {
      {"SGD", [](io::NamedTensors p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{0.1}); }},
      {"SGD momentum nesterov",
       [](io::NamedTensors p) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{0.1, 0.9, 0, 0.01, true});
       }},
      {"Adam",
       [](io::NamedTensors p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.1});
       }},
      {"AdamW",
       [](io::NamedTensors p) {
         return std::make_unique<optim::AdamW>(p, optim::AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.1});
       }},
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (auto& [label, make] : optimizers) {
      INFO(label << " " << dtype_name(dtype));
      Generator gen(4);
      Tensor w0 = Tensor::randn({3, 4}, dtype, &gen), b0 = Tensor::randn({4}, dtype, &gen);
      Tensor c = Tensor::randn({3, 4}, dtype, &gen);
      auto run = [&](Device where) {
        Tensor w = w0.clone().to(where).requires_grad_(), b = b0.clone().to(where).requires_grad_();
        io::NamedTensors params{{"w", w}, {"b", b}};
        auto opt = make(params);
        double norm = 0;
        for (int step = 0; step < 3; ++step) {
          opt->zero_grad();
          Tensor loss = sum(add(mul(mul(w, w), c.to(where)), mul(b, 3.0)));  // dw = 2wc, db = 3
          loss.backward();
          norm = optim::clip_grad_norm(params, 2.0);  // clips: the gradients' norm is above 2
          opt->step();
        }
        CHECK(w.device() == where);
        for (const auto& [name, buffer] : opt->state()) CHECK(buffer.device() == where);
        return std::make_tuple(w, b, norm);
      };
      auto [w_cpu, b_cpu, n_cpu] = run(Device::cpu());
      auto [w_dev, b_dev, n_dev] = run(d);
      double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;  // float32: the CPU's vector lanes round differently
      CHECK(std::abs(n_cpu - n_dev) <= tol * n_cpu);
      CHECK(n_cpu > 2);
      expect_close("w", w_dev, w_cpu, tol);
      expect_close("b", b_dev, b_cpu, tol);
    }
  }
}

/// Fused attention's device kernels at sizes the registry's small cases do
/// not reach: several tiles of 64 (32 in float64) queries and keys, both
/// head-dim tiles (32, 64) and the per-row kernels past them, each mask kind,
/// decoding offsets and tiles mostly empty: the output and the gradients of
/// the CPU's.
/// `host_threads_reversed` (the stand-in only) runs it again with each
/// block's threads in reverse order, for the same bits.
inline void attention_matches_cpu(Device d, bool host_threads_reversed) {
  struct Case {
    const char* label;
    DType dtype;
    int64_t nq, nk, d, dv;
    AttentionMasks masks;
  };
  std::vector<bool> keep(2 * 150, true);
  for (int64_t j = 150 + 97; j < 300; ++j) keep[j] = false;  // the second sequence's last keys are padding
  const Tensor padding = Tensor::from_vector(keep, {2, 150});
  std::vector<float> bias(150 * 150);
  for (size_t e = 0; e < bias.size(); ++e) bias[e] = e % 7 == 3 ? -INFINITY : 0.01f * static_cast<float>(e % 13);
  const Case cases[] = {
      {"float32 causal n=150 d=64", DType::Float32, 150, 150, 64, 64, {{}, {}, true}},
      {"float32 cross n_q=70 n_k=150 d=32 d_v=24, key padding", DType::Float32, 70, 150, 32, 24, {{}, padding, false}},
      {"float32 float mask with -inf, window 40 each side, d=48",
       DType::Float32,
       150,
       150,
       48,
       48,
       {Tensor::from_vector(bias, {150, 150}), {}, false, 40}},
      {"float32 decoding: 20 queries after 130 keys, causal, d=64 d_v=16",
       DType::Float32,
       20,
       150,
       64,
       16,
       {{}, padding, true, 0, 130}},
      {"float64 causal window 50, n=150, d=40", DType::Float64, 150, 150, 40, 40, {{}, {}, true, 50}},
      {"float64 head dim 72: the per-row kernels", DType::Float64, 70, 70, 72, 72, {{}, {}, true}},
      // Fewer than 16 rows or columns: threads with none of them skip their elements.
      {"float32 decoding: one query after 149 keys, key padding",
       DType::Float32,
       1,
       150,
       64,
       64,
       {{}, padding, true, 0, 149}},
      {"float64 cross n_q=5 n_k=9 d=8 d_v=3, causal", DType::Float64, 5, 9, 8, 3, {{}, {}, true}},
  };
  for (const Case& c : cases) {
    INFO(c.label);
    Generator gen(3);
    std::vector<Tensor> x = {Tensor::randn({2, c.nq, 3, c.d}, c.dtype, &gen),
                             Tensor::randn({2, c.nk, 3, c.d}, c.dtype, &gen),
                             Tensor::randn({2, c.nk, 3, c.dv}, c.dtype, &gen)};
    const Tensor weights = Tensor::randn({2, c.nq, 3, c.dv}, c.dtype, &gen);
    const double scale = 1 / std::sqrt(static_cast<double>(c.d));
    // The output and the gradients of sum(out ⊙ weights) on `device`.
    auto run = [&](Device device) {
      std::vector<Tensor> leaves;
      for (const Tensor& t : x) leaves.push_back(t.to(device).detach().requires_grad_());
      AttentionMasks masks = c.masks;
      Tensor out = fused_attention(leaves[0], leaves[1], leaves[2], masks.to(device), scale);
      sum(mul(out, weights.to(device))).backward();
      std::vector<Tensor> got = {out.detach().to(Device::cpu())};
      for (const Tensor& t : leaves) got.push_back(t.grad().to(Device::cpu()));
      return got;
    };
    const std::vector<Tensor> want = run(Device::cpu()), got = run(d);
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(names[i], got[i], want[i], c.dtype == DType::Float32 ? 1e-5 : 1e-12);
    if (!host_threads_reversed) continue;
    kernel::host_threads_reversed_for_tests = true;
    const std::vector<Tensor> reversed = run(d);
    kernel::host_threads_reversed_for_tests = false;
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i].to_vector() == reversed[i].to_vector());
  }
}

/// Many parameters spread over `devices` and the CPU, as a model's are
/// (the device updates them in launches of up to 24 tensors each): 70 of
/// them (more than 24 on each of two devices), one of 40000 elements (two
/// whole blocks of clip_grad_norm's squares and a part), one empty. Three
/// steps of clip_grad_norm (which clips) and AdamW, decaying every other
/// one, or SGD with momentum and dampening (so a buffer's first step,
/// b = d, differs from the others'): the CPU's norms and parameters.
inline void many_parameters_match_cpu(const std::vector<Device>& devices) {
  for (DType dtype : {DType::Float64, DType::Float32})
    for (bool sgd : {false, true}) {
      INFO(dtype_name(dtype) << (sgd ? " SGD" : " AdamW"));
      Generator gen(5);
      std::vector<Tensor> starts, weights;
      for (int64_t i = 0; i < 70; ++i) {
        const int64_t n = i == 3 ? 40000 : i == 7 ? 0 : i * 37 % 50 + 1;
        starts.push_back(Tensor::randn({n}, dtype, &gen));
        weights.push_back(Tensor::randn({n}, dtype, &gen));
      }
      auto run = [&](bool on_devices) {
        io::NamedTensors params;
        for (size_t i = 0; i < starts.size(); ++i) {
          Device where = on_devices && i % 5 != 4 ? devices[i % devices.size()] : Device::cpu();
          params.push_back({"p" + std::to_string(i), starts[i].clone().to(where).requires_grad_()});
        }
        optim::AdamOptions options{0.01, 0.9, 0.99, 1e-8, 0.1};
        options.decays = [](const std::string& name, const Tensor&) { return name.back() % 2 == 0; };
        std::unique_ptr<optim::Optimizer> made;
        if (sgd)
          made = std::make_unique<optim::SGD>(params, optim::SGDOptions{0.01, 0.9, 0.1, 0.1, false});
        else
          made = std::make_unique<optim::AdamW>(params, options);
        optim::Optimizer& opt = *made;
        std::vector<double> norms;
        for (int step = 0; step < 3; ++step) {
          opt.zero_grad();
          for (size_t i = 0; i < starts.size(); ++i) {  // gradient 2·w ⊙ p
            if (step == 0 && i % 6 == 1) continue;      // these sit the first step out: Adam counts 2 updates of theirs
            const Tensor& p = params[i].second;
            sum(mul(mul(p, p), weights[i].to(p.device()))).backward();
          }
          norms.push_back(optim::clip_grad_norm(params, 1.0));
          opt.step();
        }
        CHECK(opt.updates(1) == 2);
        CHECK(opt.updates(2) == 3);
        // clip_grad_norm at 0 zeroes every gradient, and a NaN in one makes them all NaN, on any device (p0 is on
        // one when on_devices, p4 on the CPU).
        optim::clip_grad_norm(params, 0.0);
        for (size_t i : {size_t{0}, size_t{4}})
          for (double g : params[i].second.grad().to(Device::cpu()).to_vector()) CHECK(g == 0);
        const Tensor& poisoned = params[2].second;
        poisoned.grad().assign_(Tensor::full(poisoned.shape(), NAN, dtype).to(poisoned.device()));
        CHECK(std::isnan(optim::clip_grad_norm(params, 1.0)));
        for (size_t i : {size_t{0}, size_t{4}})
          for (double g : params[i].second.grad().to(Device::cpu()).to_vector()) CHECK(std::isnan(g));

        std::vector<Tensor> values;
        for (const auto& [name, p] : params) values.push_back(p.detach().to(Device::cpu()));
        return std::make_pair(norms, values);
      };
      auto [n_cpu, p_cpu] = run(false);
      auto [n_dev, p_dev] = run(true);
      const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;  // float32: the CPU's vector lanes round differently
      for (size_t k = 0; k < n_cpu.size(); ++k) {
        CHECK(n_cpu[k] > 10);
        CHECK(std::abs(n_cpu[k] - n_dev[k]) <= tol * n_cpu[k]);
      }
      for (size_t i = 0; i < p_cpu.size(); ++i) expect_close("p" + std::to_string(i), p_dev[i], p_cpu[i], tol);
    }
}

/// index_select's backward groups its indices on the device: 700 indices
/// (three blocks of positions) into 300 rows of dim 1 of [2, 300, 3] (the
/// starts take two rows a thread), a third of them row 7, some rows never.
/// The gradient must be the CPU's to the bit, which holds only if each row's
/// repeats are added in index order.
inline void index_select_backward_matches_cpu(Device d) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype_name(dtype));
    Generator gen(7);
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < 700; ++i) idx.push_back(i % 3 == 0 ? 7 : static_cast<int64_t>(gen.below(280)));
    Tensor index = Tensor::from_vector(idx, {700});
    Tensor x = Tensor::randn({2, 300, 3}, dtype, &gen), g = Tensor::randn({2, 700, 3}, dtype, &gen);
    Tensor x_cpu = x.clone().requires_grad_(), x_dev = x.to(d).requires_grad_();
    index_select(x_cpu, 1, index).backward(g);
    Tensor out = index_select(x_dev, 1, index.to(d));
    CHECK(out.to_vector() == index_select(x, 1, index).to_vector());
    out.backward(g.to(d));
    REQUIRE(x_dev.grad().device() == d);
    CHECK(x_dev.grad().to_vector() == x_cpu.grad().to_vector());
  }
}

/// A bad index on a device is found by the kernel, and raised as the op's
/// one-line error at the next read from that device (autograd/device_faults.h):
/// the first one since the last read, once; the device goes on. `other`
/// (a second device, if defined) keeps its own faults.
inline void bad_indices_raise_at_the_next_read(Device d, const std::optional<Device>& other) {
  using Catch::Matchers::Contains;
  auto ids = [d](std::vector<int64_t> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(d); };
  const std::string where = " (found on " + d.str() + " by a kernel)";
  Tensor x = Tensor::from_vector<double>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, {5, 3}).to(d);
  Tensor out = index_select(x, 0, ids({1, 5, 2}));  // nothing read yet: no error
  CHECK_THROWS_WITH(out.to(Device::cpu()), Contains("index_select: index 5 out of range for dim 0 of [5, 3]" + where));
  CHECK(out.to_vector() == std::vector<double>{3, 4, 5, 0, 0, 0, 6, 7, 8});  // once; the bad row reads zeros
  CHECK(index_select(x, 0, ids({4, 0})).to_vector() == std::vector<double>{12, 13, 14, 0, 1, 2});

  Tensor gathered = gather(x, 1, Tensor::from_vector<int64_t>({0, 3}, {1, 2}).to(d));
  Tensor second = index_select(x, 0, ids({-1}));
  CHECK_THROWS_WITH(second.to_vector(), Contains("gather: index 3 out of range for dim 1 of [5, 3]"));  // the first
  CHECK(second.at({0, 0}) == 0);

  nn::Embedding emb(5, 3);
  emb.to(d);
  CHECK_THROWS_WITH(emb(Tensor::from_vector<int64_t>({2, 6}, {1, 2}).to(d)).to_vector(),
                    Contains("Embedding(5, 3): id 6 out of range [0, 5)" + where));  // as on the CPU

  Tensor logits = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  Tensor loss = nn::cross_entropy(logits.to(d), ids({1, -100, 2, 0}));
  CHECK_THROWS_WITH(loss.item(), Contains("cross_entropy: target 2 at position 2 out of range for 2 classes" + where));
  Tensor kept = nn::cross_entropy(logits.to(d), ids({1, -100, 1, 0}));  // the mean over the 3 rows that count
  CHECK(std::abs(kept.item() - nn::cross_entropy(logits, Tensor::from_vector<int64_t>({1, -100, 1, 0})).item()) <
        1e-15);
  CHECK(nn::cross_entropy(logits.to(d), ids({-100, -100, -100, -100})).item() == 0);  // none count: 0, as on the CPU

  if (other) {
    Tensor far = index_select(x.to(*other), 0, ids({8}).to(*other));
    CHECK(x.to_vector().size() == 15);  // a read from d raises nothing of the other's
    CHECK_THROWS_WITH(far.to_vector(), Contains("index 8 out of range"));
  }

  // At most 1024 checks wait for a read: the next launch reads the slot itself.
  Tensor bad = index_select(x, 0, ids({9}));
  for (int i = 0; i < 1023; ++i) index_select(x, 0, ids({1}));
  CHECK_THROWS_WITH(index_select(x, 0, ids({1})), Contains("index_select: index 9 out of range"));
  CHECK(bad.to_vector().size() == 3);
}

/// One model kind on a batch: its loss, for the CPU and the device to compare.
struct ModelCase {
  std::string name;
  std::function<std::unique_ptr<nn::Module>(Generator* gen)> build;
  /// The loss of `model` on the case's batch, its inputs made on `d`.
  std::function<Tensor(nn::Module& model, Device d)> loss;
};

inline std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  auto ids = [](std::vector<int64_t> v, Shape s, Device d) { return Tensor::from_vector(v, s).to(d); };
  for (std::string kind : {"full", "window:2", "linear"}) {
    for (bool fused : {true, false}) {
      if (kind == "linear" && !fused) continue;  // one path only
      nn::GPTConfig c;
      c.vocab = 11, c.context = 8, c.width = 8, c.heads = 2, c.layers = 2, c.dropout = 0.1;
      c.attention = nn::AttentionKind::parse(kind), c.fused_attention = fused;
      cases.push_back(
          {"GPT " + kind + (fused ? " fused" : " composed"),
           [c](Generator* gen) { return std::make_unique<nn::GPT>(c, gen); },
           [ids](nn::Module& m, Device d) {
             Tensor logits = static_cast<nn::GPT&>(m).forward(ids({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2}, {2, 6}, d));
             return nn::cross_entropy(logits, ids({2, 3, 4, 5, 6, -100, 8, 9, 10, 1, 2, 3}, {2, 6}, d));
           }});
    }
  }
  nn::Seq2SeqConfig s;
  s.vocab = 9, s.context = 6, s.width = 8, s.heads = 2, s.dropout = 0.1;
  cases.push_back({"Seq2Seq", [s](Generator* gen) { return std::make_unique<nn::Seq2Seq>(s, gen); },
                   [ids](nn::Module& m, Device d) {
                     auto& model = static_cast<nn::Seq2Seq&>(m);
                     Tensor logits = model.forward(ids({1, 2, 3, 4, 5, 6, 0, 0}, {2, 4}, d), {4, 2},
                                                   ids({7, 1, 2, 7, 3, 0}, {2, 3}, d));
                     return nn::cross_entropy(logits, ids({1, 2, 8, 3, 8, -100}, {2, 3}, d));
                   }});
  for (nn::Pooling pooling : {nn::Pooling::Cls, nn::Pooling::Mean}) {
    nn::EncoderConfig e;
    e.vocab = 7, e.context = 6, e.width = 8, e.heads = 2, e.classes = 3, e.pooling = pooling, e.dropout = 0.1;
    cases.push_back({std::string("EncoderClassifier ") + nn::pooling_name(pooling),
                     [e](Generator* gen) { return std::make_unique<nn::EncoderClassifier>(e, gen); },
                     [ids](nn::Module& m, Device d) {
                       Tensor logits = static_cast<nn::EncoderClassifier&>(m).forward(
                           ids({1, 2, 3, 4, 5, 6, 1, 0, 0, 0}, {2, 5}, d), {5, 2});
                       return nn::cross_entropy(logits, ids({2, 0}, {2}, d));
                     }});
  }
  nn::ViTConfig v;
  v.image = 4, v.patch = 2, v.width = 8, v.heads = 2, v.classes = 3, v.dropout = 0.1;
  cases.push_back({"ViT", [v](Generator* gen) { return std::make_unique<nn::ViT>(v, gen); },
                   [ids](nn::Module& m, Device d) {
                     Generator pixels(5);
                     Tensor images = Tensor::rand({2, 1, 4, 4}, m.parameters()[0].dtype(), &pixels).to(d);
                     return nn::cross_entropy(static_cast<nn::ViT&>(m).forward(images), ids({1, 2}, {2}, d));
                   }});
  nn::RecommenderConfig r;
  r.items = 6, r.context = 5, r.width = 8, r.heads = 2, r.dropout = 0.1;
  cases.push_back({"Recommender", [r](Generator* gen) { return std::make_unique<nn::Recommender>(r, gen); },
                   [ids](nn::Module& m, Device d) {
                     Tensor scores = static_cast<nn::Recommender&>(m).forward(ids({1, 2, 3, 4, 5, 6, 0, 0}, {2, 4}, d));
                     return nn::cross_entropy(scores, ids({2, 3, 4, 5, 1, -100, -100, -100}, {2, 4}, d));
                   }});
  return cases;
}

/// Every model kind (the GPT with each attention kind, fused and composed;
/// Seq2Seq; both classifier poolings; the ViT; the recommender), in training
/// mode with dropout: the loss and every parameter's gradient on `d` equal
/// the CPU's (1e-12 in float64, 1e-5 relative in float32). Then a GPT's
/// cached generation: two steps of logits through a key/value cache on `d`.
inline void models_match_cpu(Device d) {
  for (const ModelCase& c : model_cases()) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      INFO(c.name << " " << dtype_name(dtype));
      const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
      Generator gen_a(11), gen_b(11);
      std::unique_ptr<nn::Module> cpu = c.build(&gen_a), there = c.build(&gen_b);
      cpu->to(dtype), there->to(dtype), there->to(d);
      manual_seed(3);  // dropout draws its masks on the host: the same for both
      Tensor loss_cpu = c.loss(*cpu, Device::cpu());
      manual_seed(3);
      Tensor loss_dev = c.loss(*there, d);
      CHECK(loss_dev.device() == d);
      expect_close("loss", loss_dev, loss_cpu, tol);
      loss_cpu.backward();
      loss_dev.backward();
      auto want = cpu->named_parameters(), got = there->named_parameters();
      REQUIRE(want.size() == got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO(want[i].first);
        REQUIRE(want[i].second.grad().defined() == got[i].second.grad().defined());
        if (!want[i].second.grad().defined()) continue;
        CHECK(got[i].second.grad().device() == d);
        expect_close("grad " + want[i].first, got[i].second.grad(), want[i].second.grad(), tol);
      }
    }
  }
  // Generation: the prefix, then one token, through a cache on the device.
  nn::GPTConfig c;
  c.vocab = 11, c.context = 8, c.width = 8, c.heads = 2, c.layers = 2;
  Generator gen_a(12), gen_b(12);
  nn::GPT cpu(c, &gen_a), there(c, &gen_b);
  there.to(d);
  cpu.eval(), there.eval();
  NoGradGuard no_grad;
  nn::KVCache cache_cpu = cpu.make_cache(1), cache_dev = there.make_cache(1);
  CHECK(cache_dev.keys[0].device() == d);
  for (const std::vector<int64_t>& step : {std::vector<int64_t>{1, 2, 3}, std::vector<int64_t>{4}}) {
    Tensor ids = Tensor::from_vector(step, {1, static_cast<int64_t>(step.size())});
    expect_close("cached logits", there.forward_cached(ids.to(d), cache_dev), cpu.forward_cached(ids, cache_cpu), 1e-5);
  }
}

}  // namespace qkv::device_checks
