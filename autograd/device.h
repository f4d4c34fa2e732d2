// Where a tensor's storage lives: the CPU, or one CUDA device. An op runs
// where its inputs live (all on one device, or it is a one-line error), and
// the autograd engine never asks: a gradient lives where its tensor lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qkv {

struct Device {
  enum class Kind : uint8_t { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;  // which CUDA device; always 0 for the CPU

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::CUDA, index}; }
  /// "cpu", "cuda" (device 0) or "cuda:N"; anything else is a one-line error.
  /// Whether the device exists is checked where memory is first taken on it.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  /// "cpu" or "cuda:N", as parse() reads it.
  std::string str() const;
  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

/// Bytes a device's allocator holds: what tensors use now, the most they
/// have used (since the last reset), and freed blocks kept for reuse.
struct DeviceMemory {
  std::size_t in_use = 0;
  std::size_t peak = 0;
  std::size_t cached = 0;
};

/// What a kind of device gives the tensor: memory, copies to and from host
/// memory, and a description. The CPU's is built in; the CUDA backend
/// (autograd/cuda/) provides the CUDA one when the build has CUDA. Kernels
/// are not here: each op family dispatches on its inputs' device itself.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// How many devices of this kind this machine has (the CPU counts as one).
  virtual int count() = 0;
  /// At least `bytes` (0 allowed) of memory on device `index`, 64-byte aligned.
  virtual void* allocate(std::size_t bytes, int index) = 0;
  virtual void release(void* data, std::size_t bytes, int index) = 0;
  /// Copies within one device, or between it and host memory. A copy from
  /// the host returns once host_src may be reused: the copy may still be
  /// queued behind the device's work, before the kernels queued after it.
  /// A copy to the host waits for all the device's queued work.
  virtual void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes, int index) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, int index) = 0;
  virtual void copy_within(void* dst, const void* src, std::size_t bytes, int index) = 0;
  virtual void fill_zero(void* data, std::size_t bytes, int index) = 0;
  /// Waits until the device has finished the work queued on it.
  virtual void synchronize(int index) = 0;
  virtual DeviceMemory memory(int index) = 0;
  virtual void reset_peak(int index) = 0;
  /// One line: the device's name and what matters about it.
  virtual std::string describe(int index) = 0;
};

/// The backend of `device`'s kind, after checking that the device exists:
/// "--device cuda" in a build without CUDA, or "cuda:3" on a machine with
/// one GPU, is a one-line error that says which.
DeviceBackend& device_backend(Device device);

/// True when this build carries the CUDA backend (configured with QKV_CUDA).
bool cuda_built();
/// CUDA devices this process can use: 0 without the backend or without a GPU.
int cuda_device_count();
/// Why there are none, for a message: what the CUDA runtime said, where it
/// said something ("CUDA: CUDA driver version is insufficient ...").
std::string cuda_count_error();

/// Kernel launches queued on devices since the program began: each kernel
/// (fills and copies within a device included) and each cuBLAS call counts
/// one; a transfer between host and device, or a zero fill (a memset),
/// none. On the tests' stand-in, the launches a GPU would get. On a GPU
/// each launch costs the host a few microseconds, which bounds a small
/// model's step: `qkv bench` reports them.
int64_t device_launches();
namespace detail {
void count_device_launch();  // kernel::launch, launch_blocks and device products call it
}

/// Tests only: makes `backend` (host memory standing in for device memory)
/// serve CUDA devices while the guard lives, so the device plumbing (copies,
/// the same-device checks, saving from a device) is tested on machines
/// without a GPU. In a build without CUDA the ops run their device kernels
/// (autograd/ops/*.cu, compiled as C++) on it as host loops; in a CUDA build
/// those kernels would read host pointers as device memory, so there it
/// serves only the plumbing.
class StandInCudaForTests {
 public:
  explicit StandInCudaForTests(DeviceBackend& backend);
  ~StandInCudaForTests();
  StandInCudaForTests(const StandInCudaForTests&) = delete;
  StandInCudaForTests& operator=(const StandInCudaForTests&) = delete;

 private:
  DeviceBackend* previous_;
};

}  // namespace qkv
