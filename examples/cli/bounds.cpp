#include "bounds.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "autograd/error.h"

namespace qkv::cli {

std::string range(int64_t low, int64_t high) { return cat("[", low, ", ", high, "]"); }

void check_range(const char* flag, int64_t v, int64_t low, int64_t high) {
  QKV_CHECK(v >= low && v <= high, "--", flag, " must be in ", range(low, high), ", got ", v);
}

int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  for (int i = 0; i < 64 && in >> key >> kib >> unit; ++i)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

void check_fits_in_memory(double bytes, const std::string& what, const char* advice) {
  int64_t have = available_memory();
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      (have < 0 || static_cast<int64_t>(limit.rlim_cur) < have))
    have = static_cast<int64_t>(limit.rlim_cur);
  if (have < 0) return;
  auto gb = [](double b) {
    char text[32];
    std::snprintf(text, sizeof text, b >= 1e12 ? "%.3g" : "%.2f", b / 1e9);
    return std::string(text);
  };
  QKV_CHECK(bytes <= static_cast<double>(have), what, " needs about ", gb(bytes), " GB; this machine has ",
            gb(static_cast<double>(have)), " GB available: ", advice);
}

void check_threads(int n) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  QKV_CHECK(n >= 0 && n <= cores, "--threads must be in ", range(0, cores), " (0: one per idle core; this machine has ",
            cores, " core", cores == 1 ? "" : "s", "), got ", n);
}

void check_thread_buffers(int n) {
  // OpenBLAS maps a buffer of up to 128 MiB (address space, not memory) per
  // thread and retries forever when it cannot: under `ulimit -v` say so instead.
  struct rlimit limit;
  if (n > 0 && ::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    double need = (static_cast<double>(n) + 1) * 128 * 1048576.0 + 512 * 1048576.0;
    QKV_CHECK(need <= static_cast<double>(limit.rlim_cur), "--threads ", n, " needs about ",
              static_cast<int64_t>(need / 1048576),
              " MiB of address space for OpenBLAS's buffers; the limit here "
              "(ulimit -v) is ",
              static_cast<int64_t>(limit.rlim_cur / 1048576), " MiB: use fewer threads");
  }
}

}  // namespace qkv::cli
