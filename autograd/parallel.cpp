#include "autograd/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace qkv {

namespace {
int default_threads() {
  static const int n = omp_get_max_threads();  // read once, before anyone changes it
  return n;
}
}  // namespace

int thread_limit() { return std::max(1, omp_get_thread_limit()); }

int set_num_threads(int n) {
  const int threads = std::min(n > 0 ? n : default_threads(), thread_limit());
  omp_set_dynamic(0);  // a region gets the threads it asks for, or OpenBLAS waits for one that never starts
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  return threads;
}

int get_num_threads() { return omp_get_max_threads(); }

void parallel_for_all(const std::vector<ItemLoop>& loops, int64_t cost_per_item, const std::source_location& where) {
  // first[i]: loop i's first chunk among all of them
  std::vector<int64_t> first(loops.size() + 1, 0);
  for (size_t i = 0; i < loops.size(); ++i)
    first[i + 1] = first[i] + (std::max<int64_t>(loops[i].n, 0) + kLoopChunk - 1) / kLoopChunk;
  parallel_for(
      first.back(), cost_per_item * kLoopChunk,
      [&](int64_t begin, int64_t end) {
        size_t i = std::upper_bound(first.begin(), first.end(), begin) - first.begin() - 1;
        for (int64_t chunk = begin; chunk < end; ++chunk) {
          while (chunk >= first[i + 1]) ++i;
          int64_t lo = (chunk - first[i]) * kLoopChunk;
          loops[i].fn(lo, std::min(loops[i].n, lo + kLoopChunk));
        }
      },
      where);
}

namespace {
// Jiffies of all cores together from /proc/stat's first line: {idle (incl. iowait), total}.
bool cpu_times(double& idle, double& total) {
  std::ifstream in("/proc/stat");
  std::string line, label;
  if (!in || !std::getline(in, line)) return false;
  std::istringstream fields(line);
  fields >> label;
  if (label != "cpu") return false;
  double v;
  idle = total = 0;
  for (int i = 0; fields >> v; ++i) {
    total += v;
    if (i == 3 || i == 4) idle += v;
  }
  return total > 0;
}
}  // namespace

int idle_threads(int sample_ms) {
  int all = default_threads();
  double idle0, total0, idle1, total1;
  if (!cpu_times(idle0, total0)) return all;
  std::this_thread::sleep_for(std::chrono::milliseconds(sample_ms));
  if (!cpu_times(idle1, total1) || total1 <= total0) return all;
  double idle_cores = (idle1 - idle0) / (total1 - total0) * std::thread::hardware_concurrency();
  return std::clamp(static_cast<int>(std::lround(idle_cores)), 1, std::min(all, thread_limit()));
}

}  // namespace qkv
