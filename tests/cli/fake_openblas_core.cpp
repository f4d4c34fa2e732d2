// LD_PRELOAD'ed by tests/cli/kernels.sh: an OpenBLAS that does not know this
// CPU. openblas_get_corename() answers "Prescott" (OpenBLAS 0.3.21's SSE3
// fallback) unless OPENBLAS_CORETYPE names a core, as a newer-than-OpenBLAS
// CPU would make it; everything else is the real OpenBLAS.
#include <cstdlib>

extern "C" char* openblas_get_corename() {
  static char prescott[] = "Prescott";
  char* forced = std::getenv("OPENBLAS_CORETYPE");
  return forced && *forced ? forced : prescott;
}
