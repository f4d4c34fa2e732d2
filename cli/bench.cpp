// qkv bench: times training steps (a GPT through the Trainer, one attention
// layer, or attention alone) on the CPU or a device, and reports tokens/s,
// GFLOP/s against the machine's own sgemm, memory and the kernels that ran.
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include <cxxopts.hpp>

#include "autograd/cpu.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/matmul.h"
#include "autograd/profile.h"
#include "bounds.h"
#include "commands.h"
#include "common.h"
#include "distributed/dist.h"
#include "optim/optim.h"
#include "train/trainer.h"

namespace qkv::cli {

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
// This process's peak resident memory: VmHWM, not getrusage's ru_maxrss, which keeps the high mark of
// the process before its exec (a bench started from a PyTorch script reported the script's 982 MiB).
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // "VmHWM: N kB"
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}
// Median GFLOP/s of C[n, m] = A[n, k]·B[k, m] in this process with its threads: through cblas_sgemm, or
// (own) through qkv's product (qkv::gemm: its own kernel where the vector level has one).
double sgemm_gflops(int64_t n, int64_t k, int64_t m, bool own) {
  Tensor a = Tensor::randn({n, k}), b = Tensor::randn({k, m}), c = Tensor::empty({n, m});
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (own)
      gemm<float>(false, false, n, m, k, a.data<float>(), k, b.data<float>(), m, c.data<float>(), m, 0.0f);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, m, k, 1.0f, a.data<float>(), k, b.data<float>(), m,
                  0.0f, c.data<float>(), m);
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
  Device device;         // where the model, its batches and its optimizer live
  bool profile = false;  // time the timed steps' regions too (autograd/profile.h)
};

// What timing one configuration measured.
struct BenchTiming {
  std::vector<double> ms;  // each timed step, sorted
  double flops_per_step = 0;
  int64_t parameters = 0;
  size_t allreduced_bytes = 0;
  int64_t launches = 0;                  // device kernel launches over the timed steps
  std::vector<profile::Region> regions;  // with --profile: the timed steps' regions
};

BenchSetup bench_setup(const cxxopts::ParseResult& args, int ranks) {
  BenchSetup b;
  b.name = args["config"].as<std::string>(), b.kernel = args["kernel"].as<std::string>();
  QKV_CHECK(b.kernel == "fused" || b.kernel == "composed", "--kernel must be fused or composed, got '",
            printable(b.kernel), "'");
  nn::GPTConfig& c = b.c;
  const std::string& config = b.name;
  // context, layers, heads, width, batch, vocabulary. gpt2 is GPT-2 small's shape at llm.c's CPU run (B = 4,
  // T = 64); gpt2-1k its full context.
  struct Row {
    const char* name;
    int64_t T, L, H, C, B, V;
  };
  static const Row kConfigs[] = {{"tiny", 64, 2, 4, 128, 16, 256},         {"small", 256, 4, 8, 256, 8, 256},
                                 {"mini", 128, 6, 6, 384, 4, 256},         {"long", 1024, 2, 4, 128, 2, 256},
                                 {"deep", 512, 6, 6, 384, 4, 256},         {"gpt2", 64, 12, 12, 768, 4, 50257},
                                 {"gpt2-1k", 1024, 12, 12, 768, 1, 50257}, {"attention", 256, 1, 8, 256, 8, 256},
                                 {"layer", 1024, 1, 8, 256, 1, 256}};
  const Row* row = nullptr;
  std::string names;
  for (const Row& r : kConfigs) {
    if (config == r.name) row = &r;
    names += (names.empty() ? "" : ", ") + std::string(r.name);
  }
  QKV_CHECK(row, "unknown --config '", printable(config), "' (", names, ")");
  c.vocab = row->V, c.context = row->T, c.layers = row->L, c.heads = row->H, c.width = row->C, b.B = row->B;
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
            "--checkpoint-activations is for the GPT configs (all but attention and layer)");
  c.attention = attention_flag(args["attention"].as<std::string>());
  c.checkpoint_activations = args.count("checkpoint-activations") > 0;
  c.fused_attention = b.kernel == "fused";
  b.steps = args["steps"].as<int64_t>(), b.warmup = args["warmup"].as<int64_t>();
  check_range("steps", b.steps, 1, 1 << 20);
  check_range("warmup", b.warmup, 0, 1 << 20);
  return b;
}

// Bytes a timed step needs on the host, roughly and on the high side: a GPT's training_step_bytes, whose
// composed kernel keeps about 8 n x n arrays a head (scores, scaled, masked, weights and their gradients:
// 1.6 GB measured at attention n = 1024 against 2.2 GB here), the fused one none. Attention alone holds q,
// k, v, the output and their gradients. B: a rank's share.
double bench_bytes(const BenchSetup& b, int ranks) {
  const nn::GPTConfig& c = b.c;
  const double T = static_cast<double>(c.context), C = static_cast<double>(c.width), H = static_cast<double>(c.heads),
               L = static_cast<double>(c.layers), V = static_cast<double>(c.vocab),
               B = static_cast<double>(b.B / ranks);
  const double scores = b.kernel == "composed" && c.attention.type != nn::AttentionKind::Linear ? 8 * H * T : 0;
  if (b.name == "attention") return 4 * B * T * (8 * C + scores);
  if (b.name == "layer") return 4 * B * T * (40 * C + scores);
  return training_step_bytes(12 * L * C * C + (V + T) * C, B * T, L, C, V, scores, /*fused_head=*/true);
}

// On a terminal, a line that counts the steps (`done` of them so far),
// erased at the end: deep takes 12 s on 2 cores, and a run that prints
// nothing for that long looks stuck. stdout, the report, is left alone.
void show_progress(const BenchSetup& b, int64_t done) {
  const int64_t total = b.warmup + b.steps;
  const int threads = get_num_threads();
  progress_line(done < total ? cat("bench ", b.name, ", ", threads, threads == 1 ? " thread" : " threads", ": step ",
                                   done + 1, " of ", total, done < b.warmup ? " (warm-up)" : "")
                             : "");
}

// The timed steps (those after the warm-up) open and close a window: their
// regions (with --profile) and their device launches, and nothing outside it.
void open_window(const BenchSetup& b, BenchTiming& t) {
  if (b.profile) profile::start();
  t.launches = -device_launches();
}
void close_window(const BenchSetup& b, BenchTiming& t) {
  if (b.profile) t.regions = profile::stop();
  t.launches += device_launches();
}

// Runs warmup + steps calls of `step`, keeping the times of the last `steps`
// in t.ms (and the window's regions and launches).
template <class Step> void time_steps(const BenchSetup& b, BenchTiming& t, Step&& step) {
  for (int64_t i = 0; i < b.warmup + b.steps; ++i) {
    if (i == b.warmup) open_window(b, t);
    show_progress(b, i);
    auto t0 = std::chrono::steady_clock::now();
    step();
    device_backend(b.device).synchronize(b.device.index);  // a device's work is queued: wait for it
    if (i >= b.warmup)
      t.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  close_window(b, t);
  show_progress(b, b.warmup + b.steps);
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
  time_steps(b, t, [&] {
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
  time_steps(b, t, [&] {
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
  train::Trainer trainer(opt, constant, {.steps = b.warmup + b.steps, .eval_every = b.warmup + b.steps, .clip = 1.0});
  trainer.loss = [&](int64_t) {
    Tensor ids = Tensor::randint(0, c.vocab, {slice, c.context}, &gen).to(b.device),
           targets = Tensor::randint(0, c.vocab, {slice, c.context}, &gen).to(b.device);
    return train::StepLoss{gpt.loss(ids, targets), 1.0 / ranks, slice * c.context};
  };
  auto last = std::chrono::steady_clock::now();
  // Each step reads its loss and gradient norm back, so a device has finished the step by then.
  trainer.on_step = [&](const train::Progress& p) {  // rank 0: the time since the previous step ended
    auto now = std::chrono::steady_clock::now();
    if (p.step > b.warmup) t.ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    if (p.step == b.warmup) open_window(b, t);
    if (p.step == b.warmup + b.steps) close_window(b, t);
    show_progress(b, p.step);
    last = now;
  };
  if (b.warmup == 0) open_window(b, t);  // step 0 has no on_step
  show_progress(b, 0);
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
    // Each launch costs the host microseconds whatever its size: at small sizes they bound the step.
    std::printf("  %.0f kernel launches a step (a cuBLAS product counts one)\n",
                static_cast<double>(t.launches) / static_cast<double>(b.steps));
  } else {
    // The model's largest product: the MLP's [B·T, C]·[C, 4C] (for attention alone, a head's scores [T, d]·[d, T];
    // for one layer, a projection [B·T, C]·[C, C]).
    int64_t gm = b.name == "attention" ? c.context : b.name == "layer" ? c.width : 4 * c.width;
    int64_t gn = b.name == "attention" ? c.context : b.B * c.context,
            gk = b.name == "attention" ? c.width / c.heads : c.width;
    // The machine's sgemm rate at that shape: the better of OpenBLAS's and qkv's own.
    const double blas = sgemm_gflops(gn, gk, gm, false), own = sgemm_gflops(gn, gk, gm, true);
    std::printf(
        "  %.1f GFLOP/s in the step; sgemm %lldx%lldx%lld here: OpenBLAS %.1f, qkv's own %.1f GFLOP/s; "
        "step/sgemm %.2f\n",
        step_gflops, static_cast<long long>(gn), static_cast<long long>(gk), static_cast<long long>(gm), blas, own,
        step_gflops / std::max(blas, own));
  }
  std::printf("  peak resident memory %.1f MiB\n", peak_rss_mib());
  std::printf("  %d thread%s, %s\n", get_num_threads(), get_num_threads() == 1 ? "" : "s",
              cpu::describe_kernels().c_str());
}

// --profile's thread counts: "2,16" -> {2, 16}, each 1 up to this machine's cores.
std::vector<int> profile_threads(const std::string& list) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> counts;
  for (size_t at = 0; at <= list.size() && counts.size() <= 8;) {
    size_t comma = std::min(list.find(',', at), list.size());
    std::string item = list.substr(at, comma - at);
    QKV_CHECK(!item.empty() && item.size() <= 4 && item.find_first_not_of("0123456789") == std::string::npos,
              "--profile takes thread counts separated by commas, like 2,16; got '", printable(list), "'");
    counts.push_back(std::stoi(item));
    QKV_CHECK(counts.back() >= 1 && counts.back() <= cores, "--profile's thread counts must be in ", range(1, cores),
              " (this machine has ", cores, " core", cores == 1 ? "" : "s", "), got ", counts.back());
    at = comma + 1;
  }
  QKV_CHECK(counts.size() <= 8, "--profile takes at most 8 thread counts, got '", printable(list), "'");
  return counts;
}

// The regions of each --profile run side by side: ms per step at each thread
// count, the speed-up from the first count to the last, and what stayed
// outside every region (the engine, allocation, serial code between loops).
void report_profile(const BenchSetup& b, const std::vector<int>& threads, const std::vector<BenchTiming>& runs) {
  const size_t R = runs.size();
  auto mean_ms = [&](const BenchTiming& t) {
    double sum = 0;
    for (double ms : t.ms) sum += ms;
    return sum / static_cast<double>(t.ms.size());
  };
  // name -> its region in each run (nullptr where a run had none)
  std::map<std::string, std::vector<const profile::Region*>> rows;
  for (size_t r = 0; r < R; ++r)
    for (const profile::Region& region : runs[r].regions) {
      auto& row = rows[region.name];
      row.resize(R, nullptr);
      row[r] = &region;
    }
  auto ms_of = [&](const std::vector<const profile::Region*>& row, size_t r) {
    return row[r] ? row[r]->seconds * 1000 / static_cast<double>(b.steps) : 0.0;
  };
  std::vector<const std::pair<const std::string, std::vector<const profile::Region*>>*> order;
  for (const auto& row : rows) order.push_back(&row);
  std::stable_sort(order.begin(), order.end(),
                   [&](auto* x, auto* y) { return ms_of(x->second, R - 1) > ms_of(y->second, R - 1); });

  std::printf("profile %s: ms per step by region, mean of %lld step%s at each thread count; %s\n", b.name.c_str(),
              static_cast<long long>(b.steps), b.steps == 1 ? "" : "s", cpu::describe_kernels().c_str());
  for (int n : threads) std::printf("%6d thr", n);
  std::printf("%s  calls  forked  items  region\n", R > 1 ? "  speed-up" : "");
  auto line = [&](const std::vector<double>& ms, const std::string& calls, const std::string& forked,
                  const std::string& items, const std::string& name) {
    for (double v : ms) std::printf("%10.3f", v);
    if (R > 1) std::printf("%9.2fx", ms.back() > 0 ? ms.front() / ms.back() : 0.0);
    std::printf("%7s %7s %6s  %s\n", calls.c_str(), forked.c_str(), items.c_str(), name.c_str());
  };
  // Regions under 0.5% of a step at every count are summed into one line.
  std::vector<double> regions_ms(R, 0), other_ms(R, 0), step_ms(R);
  for (size_t r = 0; r < R; ++r) step_ms[r] = mean_ms(runs[r]);
  int others = 0;
  for (auto* row : order) {
    std::vector<double> ms(R);
    bool shown = false;
    for (size_t r = 0; r < R; ++r) {
      ms[r] = ms_of(row->second, r);
      regions_ms[r] += ms[r];
      shown = shown || ms[r] >= 0.005 * step_ms[r];
    }
    if (!shown) {
      for (size_t r = 0; r < R; ++r) other_ms[r] += ms[r];
      ++others;
      continue;
    }
    const profile::Region* last = row->second[R - 1];
    std::string calls = last ? cat(last->calls / b.steps) : "0";
    std::string forked = !last ? "" : last->forked == 0 ? "none" : last->forked == last->calls ? "all" : "some";
    std::string items = last && last->items ? cat(last->items / last->calls) : "";
    line(ms, calls, forked, items, row->first);
  }
  if (others) line(other_ms, "", "", "", cat(others, " regions under 0.5% of a step"));
  std::vector<double> outside(R);
  for (size_t r = 0; r < R; ++r) outside[r] = step_ms[r] - regions_ms[r];
  line(outside, "", "", "", "outside regions (serial: the engine, allocation, code between loops)");
  line(step_ms, "", "", "", "step");
  for (size_t r = 0; r < R; ++r)
    std::printf("  %d thread%s: %.0f tokens/s\n", threads[r], threads[r] == 1 ? "" : "s",
                b.B * b.c.context / (step_ms[r] / 1000));
}

}  // namespace

int bench(int argc, char** argv) {
  cxxopts::Options options("qkv bench",
                           "Time full training steps (forward, loss, backward, clip, AdamW) on random tokens.");
  options.add_options()("config",
                        "tiny | small | mini | long | deep (T=512 L=6 C=384 B=4); gpt2 (GPT-2 small: L=12 H=12 "
                        "C=768, vocabulary 50,257, T=64 B=4) | gpt2-1k (T=1024 B=1); attention (causal "
                        "attention alone, B=8 n=256 C=256 8 heads); layer (one causal MHA layer, B=1 C=256 8 heads, "
                        "n = --context)",
                        cxxopts::value<std::string>()->default_value("tiny"),
                        "NAME")("steps", "timed steps", cxxopts::value<int64_t>()->default_value("10"), "N")(
      "context", "sequence length (0: the config's)", cxxopts::value<int64_t>()->default_value("0"), "N")(
      "attention", "full | window:W | linear, for the GPT configs and layer",
      cxxopts::value<std::string>()->default_value("full"),
      "KIND")("checkpoint-activations", "GPT configs: recompute each block in backward")(
      "warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value("3"), "N")(
      "kernel", "attention kernel: fused or composed", cxxopts::value<std::string>()->default_value("fused"), "NAME")(
      "threads", "threads per process (0: one per idle core)", cxxopts::value<std::string>()->default_value("0"), "N")(
      "device", kDeviceHelp, cxxopts::value<std::string>()->default_value("cpu"), "DEVICE")(
      "profile",
      "time each parallel loop and product of the step at these thread counts (e.g. 2,16) and print one table "
      "of where a step's time goes",
      cxxopts::value<std::string>(), "THREADS");
  cxxopts::ParseResult args;
  if (!parse(options, argc, argv, args)) return 0;
  const bool profiling = args.count("profile") > 0;
  QKV_CHECK(!profiling || !args.count("threads"), "--profile sets the thread counts itself: drop --threads");
  QKV_CHECK(!profiling || dist::world_size() == 1, "--profile times one process: run it without mpirun");
  const std::vector<int> counts = profiling ? profile_threads(args["profile"].as<std::string>()) : std::vector<int>{};
  if (!profiling) set_threads_option(args);
  const Device device = set_device_option(args["device"].as<std::string>());
  QKV_CHECK(!profiling || device.is_cpu(), "--profile times the CPU's loops and products: drop --device");
  BenchSetup b = bench_setup(args, dist::world_size());
  b.device = device;
  // Before anything is built: a long --context must be refused, not end in the kernel's OOM killer.
  if (device.is_cpu())
    check_fits_in_memory(bench_bytes(b, dist::world_size()),
                         cat("--config ", b.name, " at context ", b.c.context, " (batch ", b.B, ", kernel ", b.kernel,
                             dist::world_size() > 1 ? ", this rank's share" : "", ")"),
                         "use a smaller --context");
  b.profile = profiling;
  if (!device.is_cpu()) device_backend(device).reset_peak(device.index);
  auto run = [&] {
    manual_seed(1);
    Generator gen(7);
    return b.name == "attention" ? time_attention(b, gen) : b.name == "layer" ? time_layer(b, gen) : time_gpt(b, gen);
  };
  if (profiling) {
    std::vector<BenchTiming> runs;
    for (int n : counts) {
      set_thread_count(n);
      runs.push_back(run());
    }
    report_profile(b, counts, runs);
    return 0;
  }
  BenchTiming t = run();
  if (dist::rank() != 0) return 0;  // the ranks step together (the all-reduce waits for the slowest): rank 0 reports
  report_bench(b, t);
  return 0;
}

}  // namespace qkv::cli
