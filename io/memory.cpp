#include "io/memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "autograd/error.h"

namespace qkv::io {

int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  for (int i = 0; i < 64 && in >> key >> kib >> unit; ++i)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

double mapped_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  for (int i = 0; i < 100 && std::getline(in, line); ++i)
    if (line.rfind("VmSize:", 0) == 0) return std::strtod(line.c_str() + 7, nullptr) * 1024;  // "VmSize: N kB"
  return 0;
}

void check_fits_in_memory(double bytes, const std::string& what, const char* advice) {
  int64_t have = available_memory();
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    // Under ulimit -v what is mapped already (the program, its libraries) is spent.
    int64_t left = std::max<int64_t>(0, static_cast<int64_t>(limit.rlim_cur) - static_cast<int64_t>(mapped_bytes()));
    if (have < 0 || left < have) have = left;
  }
  if (have < 0) return;
  auto gb = [](double b) {
    char text[32];
    std::snprintf(text, sizeof text, b >= 1e12 ? "%.3g" : "%.2f", b / 1e9);
    return std::string(text);
  };
  QKV_CHECK(bytes <= static_cast<double>(have), what, " needs about ", gb(bytes), " GB; this machine has ",
            gb(static_cast<double>(have)), " GB available: ", advice);
}

}  // namespace qkv::io
