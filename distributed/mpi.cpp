// distributed/ on MPI (built when CMake finds it; see dist.h).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "autograd/error.h"
#include "distributed/dist.h"

namespace qkv::dist {

namespace {
bool started = false;
int my_rank = 0, ranks = 1, local_ranks = 1;

// Any of these in the environment: a launcher started this process as a rank.
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

MPI_Datatype mpi_type(DType dtype) {
  QKV_CHECK(is_floating(dtype), "dist: gradients must be float32 or float64, not ", dtype_name(dtype));
  return dtype == DType::Float32 ? MPI_FLOAT : MPI_DOUBLE;
}

// Sums the concatenation of `grads` (all of element type T) over the ranks,
// `cap` elements per all-reduce, and divides by the rank count.
template <class T> void average(const std::vector<Tensor>& grads, size_t cap, MPI_Datatype type) {
  struct Piece {
    T* data;
    size_t count, at;  // elements, position in the bucket
  };
  std::vector<T> bucket;
  std::vector<Piece> pieces;
  size_t used = 0;
  auto flush = [&] {
    if (used == 0) return;
    MPI_Allreduce(MPI_IN_PLACE, bucket.data(), static_cast<int>(used), type, MPI_SUM, MPI_COMM_WORLD);
    for (const Piece& p : pieces)
      for (size_t i = 0; i < p.count; ++i) p.data[i] = bucket[p.at + i] / static_cast<T>(ranks);
    pieces.clear();
    used = 0;
  };
  for (const Tensor& g : grads) {
    T* data = g.data<T>();
    size_t left = static_cast<size_t>(g.numel());
    while (left > 0) {  // a tensor larger than a bucket spans several
      if (bucket.size() < cap) bucket.resize(cap);
      size_t take = std::min(left, cap - used);
      std::memcpy(bucket.data() + used, data, take * sizeof(T));
      pieces.push_back({data, take, used});
      used += take, data += take, left -= take;
      if (used == cap) flush();
    }
  }
  flush();
}
}  // namespace

bool built_with_mpi() { return true; }

void init(int* argc, char*** argv) {
  if (started || !launched_by_mpi()) return;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  started = true;
  if (provided < MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "qkv: this MPI does not support MPI_THREAD_FUNNELED (OpenMP threads beside MPI)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, my_rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
}

void finalize() {
  int done = 0;
  if (started) MPI_Finalized(&done);
  if (started && !done) MPI_Finalize();
}

bool active() { return started; }
int rank() { return my_rank; }
int world_size() { return ranks; }
int local_size() { return local_ranks; }

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (started && ranks > 1) MPI_Abort(MPI_COMM_WORLD, code);
  finalize();
  std::exit(code);
}

void broadcast(const std::vector<Tensor>& params, int root) {
  if (ranks == 1) return;
  for (const Tensor& p : params) {
    size_t bytes = static_cast<size_t>(p.numel()) * element_size(p.dtype());
    QKV_CHECK(bytes <= static_cast<size_t>(INT32_MAX), "dist::broadcast: a ", bytes, "-byte tensor is too large");
    MPI_Bcast(p.raw_data(), static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
  }
}

size_t average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes) {
  // A gradient missing on every rank stays missing (the optimizer skips
  // it); missing on some ranks only, it counts as zeros there.
  std::vector<int> present(params.size());
  for (size_t i = 0; i < params.size(); ++i) present[i] = params[i].grad().defined();
  if (ranks > 1 && !present.empty())
    MPI_Allreduce(MPI_IN_PLACE, present.data(), static_cast<int>(present.size()), MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  std::vector<Tensor> f32, f64;
  size_t bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!present[i]) continue;
    if (!p.grad().defined()) p.impl()->grad = Tensor::zeros(p.shape(), p.dtype()).impl_ptr();
    Tensor g = p.grad();
    mpi_type(g.dtype());
    (g.dtype() == DType::Float32 ? f32 : f64).push_back(g);
    bytes += static_cast<size_t>(g.numel()) * element_size(g.dtype());
  }
  if (ranks == 1) return bytes;
  size_t cap = std::clamp<size_t>(bucket_bytes, 4096, size_t{1} << 30);
  average<float>(f32, cap / sizeof(float), MPI_FLOAT);
  average<double>(f64, cap / sizeof(double), MPI_DOUBLE);
  return bytes;
}

void sum(std::vector<double>& values) {
  if (ranks > 1)
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int64_t broadcast_value(int64_t value, int root) {
  if (ranks > 1) MPI_Bcast(&value, 1, MPI_INT64_T, root, MPI_COMM_WORLD);
  return value;
}

bool same_on_all_ranks(uint64_t value) {
  if (ranks == 1) return true;
  uint64_t both[2] = {value, ~value};  // min of ~v is ~(max of v): one reduction gives both
  MPI_Allreduce(MPI_IN_PLACE, both, 2, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  return both[0] == ~both[1];
}

}  // namespace qkv::dist
