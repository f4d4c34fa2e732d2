// What this machine and this process can still give: the checks that turn
// "the kernel killed it" into a one-line error before the work starts.
#pragma once

#include <cstdint>
#include <string>

namespace qkv::io {

/// The memory this machine can give now (MemAvailable), in bytes; -1 where unknown.
int64_t available_memory();

/// The address space this process has mapped so far (VmSize), 0 if unknown.
double mapped_bytes();

/// Throws unless `bytes` (what `what` needs, e.g. "this run (parameters,
/// gradients, AdamW state, activations)") fits in the available memory (and
/// under `ulimit -v`, in the address space left), naming the figures and
/// `advice`.
void check_fits_in_memory(double bytes, const std::string& what, const char* advice);

}  // namespace qkv::io
