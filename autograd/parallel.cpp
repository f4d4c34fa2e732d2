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

void set_num_threads(int n) {
  int original = default_threads();
  int threads = n > 0 ? n : original;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int get_num_threads() { return omp_get_max_threads(); }

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
  return std::clamp(static_cast<int>(std::lround(idle_cores)), 1, all);
}

}  // namespace qkv
