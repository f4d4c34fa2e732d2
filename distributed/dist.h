// Data-parallel training across processes with MPI: every rank holds the
// whole model, trains on its slice of each global batch, and the ranks
// average their gradients before the optimizer step, so all of them hold
// the same parameters after every step.
//
// Built on MPI when CMake finds it (Debian: libopenmpi-dev); without it the
// same functions exist for one process and init() refuses to run under
// mpirun with more than one rank, saying what is missing.
//
// Only the thread that called init() talks to MPI (MPI_THREAD_FUNNELED):
// qkv's OpenMP threads never do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/tensor.h"

namespace qkv::dist {

/// Whether this build has MPI.
bool built_with_mpi();

/// Starts MPI when the process was launched by an MPI launcher (mpirun,
/// mpiexec, srun); a process started alone stays a world of one without
/// touching MPI. Call once, first thing in main; finalize() at exit.
void init(int* argc, char*** argv);
/// Ends MPI (no-op when init() did not start it). Safe to call twice.
void finalize();
/// Whether init() started MPI.
bool active();
/// How many ranks a launcher (mpirun, srun) started, read from its
/// environment without starting MPI: 1 for a process started alone. Lets
/// a command that runs in one process refuse to run N times side by side.
int launched_ranks();
/// This process's rank according to the launcher's environment (0 alone).
int launched_rank();

/// This process's rank in [0, world_size()) and the number of ranks.
int rank();
int world_size();
/// Ranks on this machine (for splitting its cores); 1 without MPI.
int local_size();

/// Ends every rank of the job at once (MPI_Abort), e.g. after an error on
/// one rank that the others would wait for forever. Exits when not active.
[[noreturn]] void abort(int code);

/// Copies rank `root`'s parameter values to every rank.
void broadcast(const std::vector<Tensor>& params, int root = 0);

/// Replaces every parameter's gradient by its mean over the ranks (sum, then
/// divide by world_size()). Gradients travel in buckets of up to
/// `bucket_bytes`, one all-reduce per bucket, not one per tensor. A gradient
/// missing on every rank stays missing (optimizers skip it); missing on some,
/// it counts as zeros there. Returns the bytes each rank all-reduced.
inline constexpr size_t kBucketBytes = size_t{8} << 20;
size_t average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes = kBucketBytes);

/// Element-wise sum of `values` over the ranks, in place.
void sum(std::vector<double>& values);
/// Rank `root`'s value on every rank.
int64_t broadcast_value(int64_t value, int root = 0);

/// A hash of the parameters' bytes (FNV-1a): equal on every rank exactly
/// when all ranks hold bit-identical parameters (barring a collision).
uint64_t parameter_hash(const std::vector<Tensor>& params);
/// Whether `value` is the same on every rank.
bool same_on_all_ranks(uint64_t value);

/// The half-open range [first, first + count) of `global` items that `rank`
/// of `ranks` takes: contiguous slices, sizes differing by at most one.
struct Slice {
  int64_t first = 0, count = 0;
};
Slice slice_of(int64_t global, int rank, int ranks);

}  // namespace qkv::dist
