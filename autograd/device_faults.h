// Bad indices that a device's kernels find. A kernel cannot throw, and a
// check on the host would copy the indices back, which waits for everything
// queued on the device: three or four waits a training step. So a kernel
// that meets an index out of range records it in its device's fault slot
// (the first kernel's wins; within a kernel on a GPU, whichever thread is
// first), reads and writes nothing out of bounds, and goes on; the host
// raises it as the op's one-line error at its next read from that device
// (Tensor::to(Device::cpu()), item, at, to_vector), when every kernel queued
// before the read has run. CUDA reports a kernel's assert the same way,
// late, but there the process cannot go on; here it can. One host thread
// drives a device, as everywhere in the library: a check registered by one
// thread while another reads could be forgotten (the mutex keeps the
// registry itself whole).
#pragma once

#include <cstdint>
#include <string>

#include "autograd/device.h"

namespace qkv {

/// A device's fault slot: 0, or 1 + which check failed, its bad value and
/// where it was (a position, or -1).
struct DeviceFault {
  int64_t check;
  int64_t value;
  int64_t at;
};

/// What a kernel needs to report a failed check: where, and which check.
struct FaultReport {
  DeviceFault* slot;
  int64_t check;
};

/// Registers a check that kernels about to be launched on `device` make:
/// when one fails, the next read raises `prefix` + the bad value (+ " at
/// position " + where, if the kernel gave one) + `suffix`, the message the
/// host's own check gives, + the device that found it. After 1024
/// checks with no read in between, it reads the slot itself (bounded memory).
FaultReport expect_valid(Device device, std::string prefix, std::string suffix);

/// Throws the first failed check recorded on `device` since the last call,
/// and forgets every check registered before it. Reads the slot only when a
/// check is pending. Called after every copy from a device to the host.
void raise_device_faults(Device device);

/// Copies `bytes` from a device to the host (which waits for its queued
/// work), then raises its faults.
void read_from_device(Device device, void* host_dst, const void* device_src, std::size_t bytes);

/// Tests only: drops every device's slot (StandInCudaForTests calls it when
/// the stand-in device comes and goes).
void forget_device_faults();

}  // namespace qkv
