// Every count a flag or a file can set, with one set of bounds: training
// checks its flags against the same numbers that loading checks a
// checkpoint's description against, so qkv never writes a file it refuses
// to read, and --help shows them. Sizes are also checked against the memory
// this machine has, before anything is allocated.
#pragma once

#include <cstdint>
#include <string>

#include "io/memory.h"
#include "nn/model_kinds.h"

namespace qkv::cli {

// The model's own sizes are bounded where models are described (nn/model_kinds.h).
using nn::kMaxContext;
using nn::kMaxLayers;
using nn::kMaxVocab;
using nn::kMaxWidth;
inline constexpr int64_t kMaxInputLength = 64, kMaxDigits = 9;  // the sequence tasks' --max-len and --digits
inline constexpr int64_t kMaxBatch = 1 << 16, kMaxExamples = 1 << 20, kMaxSteps = int64_t{1} << 40;
inline constexpr int64_t kMaxNewTokens = 1 << 20;
/// The most --threads: OpenBLAS maps 128 MiB of address space per thread.
inline constexpr int64_t kMaxThreads = 64;

/// "[low, high]" for --help texts and errors.
std::string range(int64_t low, int64_t high);

/// Throws "--flag must be in [low, high], got v" unless low <= v <= high.
void check_range(const char* flag, int64_t v, int64_t low, int64_t high);

// The memory checks live in the library (io/memory.h): the study page's log reader needs them too.
using io::available_memory;
using io::check_fits_in_memory;

/// Bytes a training step needs, roughly and on the high side (train's and
/// bench's estimates): parameters, their gradients and two optimizer moments
/// (16 bytes each), and per token of the batch each layer's saved activations
/// and their gradients (about 40 floats per channel, plus `scores` floats of
/// n x n attention arrays where the composed path keeps them) and the logits:
/// with a fused head (nn::linear_cross_entropy) one block of them, written
/// over by its gradient; else the logits, their gradient and a spare copy.
double training_step_bytes(double parameters, double tokens, double layers, double width, double vocab, double scores,
                           bool fused_head);

/// --threads: 0 (one per idle core) up to kMaxThreads.
void check_threads(int64_t n);
/// Past this machine's cores: a one-line warning, once (threads share cores: slower, the same bits).
void warn_past_cores(int n);
/// Refuses `n` threads under an address-space limit (ulimit -v) too small for
/// OpenBLAS's per-thread buffers: OpenBLAS would retry mapping them forever.
void check_thread_buffers(int n);

}  // namespace qkv::cli
