#include "bounds.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "autograd/error.h"
#include "io/memory.h"
#include "nn/loss.h"

namespace qkv::cli {

std::string range(int64_t low, int64_t high) { return cat("[", low, ", ", high, "]"); }

void check_range(const char* flag, int64_t v, int64_t low, int64_t high) {
  QKV_CHECK(v >= low && v <= high, "--", flag, " must be in ", range(low, high), ", got ", v);
}

double training_step_bytes(double parameters, double tokens, double layers, double width, double vocab, double scores,
                           bool fused_head) {
  const double logits =
      fused_head ? std::min(tokens * vocab, static_cast<double>(nn::kHeadLossBlock)) : 3 * tokens * vocab;
  return 16 * parameters + 4 * (tokens * layers * (40 * width + scores) + logits);
}

namespace {
int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }
}  // namespace

void check_threads(int64_t n) {
  QKV_CHECK(n >= 0 && n <= kMaxThreads, "--threads must be in ", range(0, kMaxThreads),
            " (0: one per idle core; this machine has ", cores(), " core", cores() == 1 ? "" : "s", "), got ", n);
}

void warn_past_cores(int n) {
  // More threads than cores is slow, not wrong: it is how a small machine checks that results stay the same.
  static bool warned = false;
  if (n <= cores() || warned) return;
  warned = true;
  std::fprintf(stderr, "qkv: warning: --threads %d on %d core%s: threads share cores (slower; the same results)\n", n,
               cores(), cores() == 1 ? "" : "s");
}

void check_thread_buffers(int n) {
  // OpenBLAS maps a buffer of up to 128 MiB (address space, not memory) per
  // thread and retries forever when it cannot: under `ulimit -v` say so instead.
  // What is mapped already counts (the program and its libraries: ~0.3 GB, and
  // a CUDA build's cuBLAS ~0.6 GB more), and 256 MiB are left for the run.
  struct rlimit limit;
  if (n > 0 && ::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    double need = (static_cast<double>(n) + 1) * 128 * 1048576.0 + 256 * 1048576.0, mapped = io::mapped_bytes();
    QKV_CHECK(need + mapped <= static_cast<double>(limit.rlim_cur), "--threads ", n, " needs about ",
              static_cast<int64_t>(need / 1048576),
              " MiB of address space for OpenBLAS's buffers and the run; the limit here (ulimit -v) is ",
              static_cast<int64_t>(limit.rlim_cur / 1048576), " MiB, of which ", static_cast<int64_t>(mapped / 1048576),
              " are mapped already: use fewer threads");
  }
}

}  // namespace qkv::cli
