// qkv bench: times training steps (a GPT through the Trainer, one attention
// layer, or attention alone) on the CPU or a device, and reports tokens/s,
// GFLOP/s against the machine's own sgemm, memory and the kernels that ran.
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <cxxopts.hpp>

#include "autograd/cpu.h"
#include "autograd/ops/attention.h"
#include "commands.h"
#include "dist/dist.h"
#include "optim/optim.h"
#include "train/trainer.h"

namespace qkv::cli {

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double peak_rss_mib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}
// Median GFLOP/s of cblas_sgemm on C[n, m] = A[n, k]·B[k, m], in this process with its threads.
double sgemm_gflops(int64_t n, int64_t k, int64_t m) {
  Tensor a = Tensor::randn({n, k}), b = Tensor::randn({k, m}), c = Tensor::empty({n, m});
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0f, a.data<float>(), k, b.data<float>(), m, 0.0f,
                c.data<float>(), m);
    if (i >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * m * k / median_of(times) / 1e9;
}
}  // namespace

namespace {

// A bench configuration: the model (or layer) and its global batch.
struct BenchSetup {
  std::string name, kernel;
  nn::GPTConfig c;
  int64_t B = 0, warmup = 0, steps = 0;
  Device device;  // where the model, its batches and its optimizer live
};

// What timing one configuration measured.
struct BenchTiming {
  std::vector<double> ms;  // each timed step, sorted
  double flops_per_step = 0;
  int64_t parameters = 0;
  size_t allreduced_bytes = 0;
};

BenchSetup bench_setup(const cxxopts::ParseResult& args, int ranks) {
  BenchSetup b;
  b.name = args["config"].as<std::string>(), b.kernel = args["kernel"].as<std::string>();
  QKV_CHECK(b.kernel == "fused" || b.kernel == "composed", "--kernel must be fused or composed, got '",
            printable(b.kernel), "'");
  nn::GPTConfig& c = b.c;
  const std::string& config = b.name;
  // context, layers, heads, width, batch
  struct Row {
    const char* name;
    int64_t T, L, H, C, B;
  };
  static const Row kConfigs[] = {{"tiny", 64, 2, 4, 128, 16},  {"small", 256, 4, 8, 256, 8},
                                 {"mini", 128, 6, 6, 384, 4},  {"long", 1024, 2, 4, 128, 2},
                                 {"deep", 512, 6, 6, 384, 4},  {"attention", 256, 1, 8, 256, 8},
                                 {"layer", 1024, 1, 8, 256, 1}};
  const Row* row = nullptr;
  for (const Row& r : kConfigs)
    if (config == r.name) row = &r;
  QKV_CHECK(row, "unknown --config '", printable(config), "' (tiny, small, mini, long, deep, attention, layer)");
  c.vocab = 256, c.context = row->T, c.layers = row->L, c.heads = row->H, c.width = row->C, b.B = row->B;
  // Under mpirun the GPT configs train data parallel: B is the global batch.
  QKV_CHECK(ranks == 1 || (config != "attention" && config != "layer"), "--config ", config,
            " times one process; under mpirun use a GPT config");
  QKV_CHECK(b.B % ranks == 0, "--config ", config, "'s batch ", b.B, " does not split evenly over ", ranks, " ranks");
  int64_t context = args["context"].as<int64_t>();
  QKV_CHECK(context >= 0 && context <= 1 << 20, "--context must be in [0, 1048576], got ", context);
  if (context > 0) c.context = context;
  // A flag a config ignores is refused rather than reported as if it applied.
  QKV_CHECK(!args.count("attention") || config != "attention",
            "--attention is for the GPT configs and layer: "
            "--config attention times full causal attention alone");
  QKV_CHECK(!args.count("checkpoint-activations") || (config != "attention" && config != "layer"),
            "--checkpoint-activations is for the GPT configs (tiny, small, mini, long, deep)");
  c.attention = nn::AttentionKind::parse(args["attention"].as<std::string>());
  c.checkpoint_activations = args.count("checkpoint-activations") > 0;
  c.fused_attention = b.kernel == "fused";
  b.steps = args["steps"].as<int64_t>(), b.warmup = args["warmup"].as<int64_t>();
  check_range("steps", b.steps, 1, 1 << 20);
  check_range("warmup", b.warmup, 0, 1 << 20);
  return b;
}

// Runs warmup + steps calls of `step`, keeping the times of the last `steps`.
template <class Step> std::vector<double> time_steps(const BenchSetup& b, Step&& step) {
  std::vector<double> ms;
  for (int64_t i = 0; i < b.warmup + b.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    device_backend(b.device).synchronize(b.device.index);  // a device's work is queued: wait for it
    if (i >= b.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

// One layer's attention alone (no projections): the fused kernel or the composed path.
BenchTiming time_attention(const BenchSetup& b, Generator& gen) {
  const nn::GPTConfig& c = b.c;
  BenchTiming t;
  int64_t hd = c.width / c.heads;
  auto leaf = [&] {
    return Tensor::randn({b.B, c.context, c.heads, hd}, DType::Float32, &gen).to(b.device).requires_grad_();
  };
  Tensor q = leaf(), k = leaf(), v = leaf();
  // The composed path's [n, n] mask (the fused kernel needs none: 268 MB at n = 16384)
  Tensor causal = b.kernel == "fused" ? Tensor() : nn::causal_mask(c.context, c.context).to(b.device);
  t.ms = time_steps(b, [&] {
    for (Tensor* x : {&q, &k, &v}) x->zero_grad();
    if (b.kernel == "fused") {
      sum(fused_attention(q, k, v, {Tensor(), Tensor(), true}, 1 / std::sqrt(static_cast<double>(hd)))).backward();
    } else {
      auto heads = [](const Tensor& x) { return permute(x, {0, 2, 1, 3}); };
      Tensor o = nn::scaled_dot_product_attention(heads(q), heads(k), heads(v), causal).output;
      sum(permute(o, {0, 2, 1, 3})).backward();
    }
  });
  // scores and weighted sum, 2·B·T²·C each, x3 for backward (causal half not discounted)
  t.flops_per_step = 3.0 * 2 * 2.0 * b.B * c.context * c.context * c.width;
  return t;
}

// One causal MHA layer, projections included, with the chosen attention.
BenchTiming time_layer(const BenchSetup& b, Generator& gen) {
  const nn::GPTConfig& c = b.c;
  BenchTiming t;
  nn::MultiHeadAttention mha(c.width, c.heads);
  mha.to(b.device);
  t.parameters = mha.num_parameters();
  nn::MhaOptions options;
  options.causal = true;
  options.kind = c.attention;
  options.fused = c.fused_attention;
  Tensor x = Tensor::randn({b.B, c.context, c.width}, DType::Float32, &gen).to(b.device).requires_grad_();
  t.ms = time_steps(b, [&] {
    mha.zero_grad();
    x.zero_grad();
    sum(mha.forward(x, options).output).backward();
  });
  double span = c.attention.type == nn::AttentionKind::Window ? std::min<double>(c.context, c.attention.window + 1)
                                                              : static_cast<double>(c.context);
  t.flops_per_step = 3.0 * (4 * 2.0 * b.B * c.context * c.width * c.width + 2 * 2.0 * b.B * c.context * span * c.width);
  return t;
}

// A GPT's training step through the library's Trainer (train/trainer.h), as
// qkv train runs it: the interval between steps is what is timed.
BenchTiming time_gpt(const BenchSetup& b, Generator& gen) {
  const nn::GPTConfig& c = b.c;
  const int ranks = dist::world_size();
  BenchTiming t;
  nn::GPT gpt(c);
  gpt.to(b.device);
  t.parameters = gpt.num_parameters();
  optim::AdamOptions o;
  o.lr = 1e-4;
  optim::AdamW opt(gpt.named_parameters(), o);
  optim::ConstantLR constant(1e-4);
  std::vector<Tensor> params = gpt.parameters();
  dist::broadcast(params);
  if (ranks > 1) t.allreduced_bytes = static_cast<size_t>(t.parameters) * sizeof(float);  // every gradient, once a step
  const int64_t slice = b.B / ranks;  // equal slices, so each rank's share is 1/ranks
  train::Trainer trainer(gpt.named_parameters(), opt, constant,
                         {.steps = b.warmup + b.steps, .eval_every = b.warmup + b.steps, .clip = 1.0});
  trainer.loss = [&](int64_t) {
    Tensor ids = Tensor::randint(0, 256, {slice, c.context}, &gen).to(b.device),
           targets = Tensor::randint(0, 256, {slice, c.context}, &gen).to(b.device);
    return train::StepLoss{nn::cross_entropy(gpt.forward(ids), targets), 1.0 / ranks, slice * c.context};
  };
  auto last = std::chrono::steady_clock::now();
  // Each step reads its loss and gradient norm back, so a device has finished the step by then.
  trainer.on_step = [&](const train::Progress& p) {  // rank 0: the time since the previous step ended
    auto now = std::chrono::steady_clock::now();
    if (p.step > b.warmup) t.ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  };
  trainer.run();
  // 6 FLOPs per weight per token (forward 2, backward 4) for the blocks' 12·C² and the tied head's V·C,
  // and 12·L·T·C per token for attention's two products (scores, weighted sum; causal half not discounted).
  double matmul_weights =
      static_cast<double>(c.layers) * 12 * c.width * c.width + static_cast<double>(c.vocab) * c.width;
  t.flops_per_step = b.B * c.context * (6 * matmul_weights + 12.0 * c.layers * c.context * c.width);
  return t;
}

void report_bench(const BenchSetup& b, BenchTiming& t) {
  const nn::GPTConfig& c = b.c;
  const int ranks = dist::world_size();
  std::sort(t.ms.begin(), t.ms.end());
  double median = t.ms[t.ms.size() / 2];
  double step_gflops = t.flops_per_step / (median / 1000) / 1e9;
  std::printf("bench %s: T=%lld L=%lld heads=%lld C=%lld B=%lld, %lld parameters, %s %s attention%s\n", b.name.c_str(),
              static_cast<long long>(c.context), static_cast<long long>(c.layers), static_cast<long long>(c.heads),
              static_cast<long long>(c.width), static_cast<long long>(b.B), static_cast<long long>(t.parameters),
              c.attention.str().c_str(), b.kernel.c_str(),
              c.checkpoint_activations ? ", blocks recomputed in backward" : "");
  std::printf("  median %.2f ms/step over %lld steps (min %.2f, max %.2f), %.0f tokens/s\n", median,
              static_cast<long long>(b.steps), t.ms.front(), t.ms.back(), b.B * c.context / (median / 1000));
  if (ranks > 1) {
    // The other ranks are busy stepping: a reference sgemm here would be timed against them.
    std::printf(
        "  %d ranks (MPI) x %d thread%s, B/%d = %lld examples each; %.2f MB of gradients all-reduced per step\n", ranks,
        get_num_threads(), get_num_threads() == 1 ? "" : "s", ranks, static_cast<long long>(b.B / ranks),
        t.allreduced_bytes / 1e6);
  } else if (!b.device.is_cpu()) {
    DeviceBackend& backend = device_backend(b.device);
    std::printf("  %.1f GFLOP/s in the step on %s (%s)\n", step_gflops, b.device.str().c_str(),
                backend.describe(b.device.index).c_str());
    std::printf("  peak device memory %.1f MiB\n", backend.memory(b.device.index).peak / 1048576.0);
  } else {
    // The model's largest product: the MLP's [B·T, C]·[C, 4C] (for attention alone, a head's scores [T, d]·[d, T];
    // for one layer, a projection [B·T, C]·[C, C]).
    int64_t gm = b.name == "attention" ? c.context : b.name == "layer" ? c.width : 4 * c.width;
    int64_t gn = b.name == "attention" ? c.context : b.B * c.context,
            gk = b.name == "attention" ? c.width / c.heads : c.width;
    double blas = sgemm_gflops(gn, gk, gm);
    std::printf("  %.1f GFLOP/s in the step; sgemm %lldx%lldx%lld here: %.1f GFLOP/s; step/sgemm %.2f\n", step_gflops,
                static_cast<long long>(gn), static_cast<long long>(gk), static_cast<long long>(gm), blas,
                step_gflops / blas);
  }
  std::printf("  peak resident memory %.1f MiB\n", peak_rss_mib());
  std::printf("  %d thread%s, %s\n", get_num_threads(), get_num_threads() == 1 ? "" : "s",
              cpu::describe_kernels().c_str());
}

}  // namespace

int bench(int argc, char** argv) {
  cxxopts::Options options("qkv bench",
                           "Time full training steps (forward, loss, backward, clip, AdamW) on random bytes.");
  options.add_options()("config",
                        "tiny | small | mini | long | deep (T=512 L=6 C=384 B=4); attention (causal "
                        "attention alone, B=8 n=256 C=256 8 heads); layer (one causal MHA layer, B=1 C=256 8 heads, "
                        "n = --context)",
                        cxxopts::value<std::string>()->default_value("tiny"),
                        "NAME")("steps", "timed steps", cxxopts::value<int64_t>()->default_value("10"), "N")(
      "context", "sequence length (0: the config's)", cxxopts::value<int64_t>()->default_value("0"), "N")(
      "attention", "full | window:W | linear, for the GPT configs and layer",
      cxxopts::value<std::string>()->default_value("full"),
      "KIND")("checkpoint-activations", "GPT configs: recompute each block in backward")(
      "warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value("3"), "N")(
      "kernel", "attention kernel: fused (default) or composed", cxxopts::value<std::string>()->default_value("fused"),
      "NAME")("threads", "threads per process (0: one per idle core)", cxxopts::value<int>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  set_threads_option(args["threads"].as<int>());
  const Device device = set_device_option(args["device"].as<std::string>());
  BenchSetup b = bench_setup(args, dist::world_size());
  b.device = device;
  if (!device.is_cpu()) device_backend(device).reset_peak(device.index);
  manual_seed(1);
  Generator gen(7);
  BenchTiming t = b.name == "attention" ? time_attention(b, gen)
                  : b.name == "layer"   ? time_layer(b, gen)
                                        : time_gpt(b, gen);
  if (dist::rank() != 0) return 0;  // the ranks step together (the all-reduce waits for the slowest): rank 0 reports
  report_bench(b, t);
  return 0;
}

}  // namespace qkv::cli
