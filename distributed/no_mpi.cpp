// distributed/ without MPI: a world of one. Started by mpirun with more ranks, it
// stops with what to install instead of training N copies side by side.
#include <cstdio>
#include <cstdlib>

#include "autograd/error.h"
#include "distributed/dist.h"

namespace qkv::dist {

bool built_with_mpi() { return false; }

void init(int*, char***) {
  if (int ranks = launched_ranks(); ranks > 1) {
    std::fprintf(stderr,
                 "qkv: started as one of %d ranks, but this qkv was built without MPI: multi-process "
                 "training needs MPI (Debian: apt-get install libopenmpi-dev openmpi-bin), then a rebuild\n",
                 ranks);
    std::exit(1);
  }
}
void finalize() {}
bool active() { return false; }
int rank() { return 0; }
int world_size() { return 1; }
int local_size() { return 1; }
void abort(int code) {
  std::fflush(stdout);
  std::exit(code);
}
void broadcast(const std::vector<Tensor>&, int) {}
size_t average_gradients(const std::vector<Tensor>& params, size_t) {
  size_t bytes = 0;
  for (const Tensor& p : params)
    if (p.grad().defined()) bytes += static_cast<size_t>(p.numel()) * element_size(p.dtype());
  return bytes;
}
void sum(std::vector<double>&) {}
int64_t broadcast_value(int64_t value, int) { return value; }
bool same_on_all_ranks(uint64_t) { return true; }

}  // namespace qkv::dist
