// The parts of distributed/ that need no MPI: batch slices and parameter hashes.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "autograd/error.h"
#include "distributed/dist.h"

namespace qkv::dist {

namespace {
int launcher_number(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (*end == '\0' && n >= 0 && n < (1 << 24)) return static_cast<int>(n);
    }
  return fallback;
}
}  // namespace

// Only what a launcher sets for the processes it starts: not Slurm's
// SLURM_NTASKS, which a whole allocation's shell has too.
int launched_ranks() { return launcher_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}, 1); }
int launched_rank() { return launcher_number({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}, 0); }

Slice slice_of(int64_t global, int rank, int ranks) {
  QKV_CHECK(ranks > 0 && rank >= 0 && rank < ranks, "slice_of: rank ", rank, " of ", ranks);
  QKV_CHECK(global >= 0, "slice_of: negative count ", global);
  // The first global % ranks ranks take one more.
  int64_t base = global / ranks, extra = global % ranks;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

uint64_t parameter_hash(const std::vector<Tensor>& params) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over 64-bit words, shapes and dtypes included
  auto mix = [&h](uint64_t word) { h = (h ^ word) * 0x100000001b3ULL; };
  for (const Tensor& p : params) {
    mix(static_cast<uint64_t>(p.dtype()));
    for (int64_t d : p.shape()) mix(static_cast<uint64_t>(d));
    const auto* bytes = static_cast<const unsigned char*>(p.raw_data());
    size_t n = static_cast<size_t>(p.numel()) * element_size(p.dtype()), i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      mix(word);
    }
    for (; i < n; ++i) mix(bytes[i]);
  }
  return h;
}

}  // namespace qkv::dist
