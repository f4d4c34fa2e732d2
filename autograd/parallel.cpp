#include "autograd/parallel.h"

#include <cblas.h>

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

}  // namespace qkv
