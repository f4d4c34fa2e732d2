// The CUDA device backend: memory (a caching allocator over cudaMalloc) and
// copies. Compiled only when the build has CUDA (QKV_HAVE_CUDA); this header
// includes no CUDA header, so C++ files may include it.
#pragma once

#include <string>

#include "autograd/device.h"

namespace qkv::cuda {

/// The process's one CUDA backend (autograd/device.cpp reaches it through
/// device_backend(Device::cuda(i))).
DeviceBackend& backend();

/// Why the CUDA runtime counts no device ("no CUDA-capable device is
/// detected", "CUDA driver version is insufficient for CUDA runtime
/// version", ...); empty when it counts them.
std::string count_error();

/// Gives device `index`'s cached blocks back to the driver, once its queued work is done: what the allocator
/// does when cudaMalloc fails, for the memory others allocate (cuBLAS's workspace) before they try again.
void release_cache(int index);

}  // namespace qkv::cuda
