#include "autograd/device.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "autograd/device_faults.h"
#include "autograd/error.h"
#include "autograd/parallel.h"

#ifdef QKV_HAVE_CUDA
#include "autograd/cuda/backend.h"
#endif

namespace qkv {

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos)
    return cuda(std::stoi(text.substr(5)));
  throw Error(cat("device '", printable(text), "' is not a device (cpu, cuda or cuda:N)"));
}

std::string Device::str() const { return is_cpu() ? "cpu" : cat("cuda:", index); }

namespace {

// Freed large blocks wait here for the next request of the same size. A
// training step allocates the same shapes every step; without the cache
// glibc maps and unmaps each large block, and every first touch page-faults
// (about 20 faults per 512x512 matmul output, ~7% of its time).
class CpuBackend final : public DeviceBackend {
 public:
#ifdef __SANITIZE_ADDRESS__
  static constexpr std::size_t kMinBytes = SIZE_MAX;  // never cache: AddressSanitizer must see every free
#else
  static constexpr std::size_t kMinBytes = 64 << 10;  // smaller blocks: malloc is fast already
#endif
  static constexpr std::size_t kMaxCached = std::size_t{1} << 30;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20, kHugeBytes = std::size_t{4} << 20;

  int count() override { return 1; }

  void* allocate(std::size_t bytes, int) override {
    std::size_t rounded = round(bytes);
    void* p = nullptr;
    if (rounded >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= rounded;
      }
    }
    if (!p && rounded >= kHugeBytes) {
      // A large block on 2 MiB pages where the kernel has them: first touching a GPT-2's 500 MB of weights
      // took 120,000 page faults (a third of loading it); with huge pages, a few hundred.
      if (posix_memalign(&p, kHugePage, rounded) != 0) p = nullptr;
      if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: where it is refused, small pages serve
    }
    if (!p && posix_memalign(&p, 64, rounded) != 0) p = nullptr;  // any size, unlike aligned_alloc
    if (!p) throw Error(cat("out of memory allocating ", bytes, " bytes"));
    std::size_t now = in_use_.fetch_add(rounded) + rounded;
    for (std::size_t seen = peak_.load(); now > seen && !peak_.compare_exchange_weak(seen, now);) {
    }
    return p;
  }

  void release(void* p, std::size_t bytes, int) override {
    std::size_t rounded = round(bytes);
    in_use_.fetch_sub(rounded);
    if (rounded >= kMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + rounded <= kMaxCached) {
        free_[rounded].push_back(p);
        cached_ += rounded;
        return;
      }
    }
    std::free(p);
  }

  void copy_from_host(void* dst, const void* src, std::size_t bytes, int) override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, int) override { copy(dst, src, bytes); }
  void copy_within(void* dst, const void* src, std::size_t bytes, int) override { copy(dst, src, bytes); }
  void fill_zero(void* p, std::size_t bytes, int) override {
    // Shared by the threads: a large fill (a gradient's zeros) was serial, so every other thread waited on it.
    parallel_for_pieces(1, static_cast<int64_t>(bytes),
                        [p](int64_t, int64_t at, int64_t n) { std::memset(static_cast<char*>(p) + at, 0, n); });
  }
  void synchronize(int) override {}
  DeviceMemory memory(int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {in_use_.load(), peak_.load(), cached_};
  }
  void reset_peak(int) override { peak_.store(in_use_.load()); }
  std::string describe(int) override { return "the CPU"; }

 private:
#ifdef __SANITIZE_ADDRESS__
  // Exact sizes: AddressSanitizer must see a kernel read or write one element past the end.
  static std::size_t round(std::size_t bytes) { return std::max<std::size_t>(bytes, 1); }
#else
  static std::size_t round(std::size_t bytes) {
    std::size_t unit = bytes >= (64 << 10) ? 4096 : 64;
    return std::max<std::size_t>((bytes + unit - 1) / unit * unit, 64);
  }
#endif
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_{0};
};

// Never destroyed: tensors in other static objects may outlive any destructor.
CpuBackend& cpu_backend() {
  static CpuBackend* backend = new CpuBackend;
  return *backend;
}

DeviceBackend*& stand_in_cuda() {
  static DeviceBackend* backend = nullptr;
  return backend;
}

DeviceBackend* cuda_backend_or_null() {
  if (stand_in_cuda()) return stand_in_cuda();
#ifdef QKV_HAVE_CUDA
  return &cuda::backend();
#else
  return nullptr;
#endif
}

}  // namespace

namespace {
std::atomic<int64_t> launches{0};
}  // namespace

int64_t device_launches() { return launches.load(std::memory_order_relaxed); }
void detail::count_device_launch() { launches.fetch_add(1, std::memory_order_relaxed); }

bool cuda_built() {
#ifdef QKV_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
  DeviceBackend* cuda = cuda_backend_or_null();
  return cuda ? cuda->count() : 0;
}

std::string cuda_count_error() {
#ifdef QKV_HAVE_CUDA
  if (!stand_in_cuda()) {
    std::string why = cuda::count_error();
    if (!why.empty()) return "CUDA: " + why;
  }
#endif
  return "is the driver loaded?";
}

DeviceBackend& device_backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  DeviceBackend* cuda = cuda_backend_or_null();
  QKV_CHECK(cuda != nullptr, "device ", device.str(),
            ": this build of qkv has no CUDA (build it where the CUDA toolkit is installed, with -DQKV_CUDA=ON)");
  int count = cuda->count();
  QKV_CHECK(count > 0, "device ", device.str(), ": no CUDA device is visible to this process (", cuda_count_error(),
            ")");
  QKV_CHECK(device.index >= 0 && device.index < count, "device ", device.str(), ": this machine has ", count,
            " CUDA device", count == 1 ? "" : "s", " (cuda:0", count > 1 ? cat("..cuda:", count - 1) : "", ")");
  return *cuda;
}

#if defined(QKV_HAVE_CUDA) && defined(__SANITIZE_ADDRESS__)
// The CUDA driver maps memory where AddressSanitizer keeps its shadow gap:
// without this, a sanitizer build's first CUDA call fails (or crashes)
// instead of finding the GPU. ASAN_OPTIONS still overrides it.
extern "C" const char* __asan_default_options() { return "protect_shadow_gap=0"; }
#endif

// The fault slots (autograd/device_faults.h) live in the stand-in's memory:
// they go when it goes, and a new one starts without any.
StandInCudaForTests::StandInCudaForTests(DeviceBackend& backend) : previous_(stand_in_cuda()) {
  forget_device_faults();
  stand_in_cuda() = &backend;
}

StandInCudaForTests::~StandInCudaForTests() {
  forget_device_faults();
  stand_in_cuda() = previous_;
}

}  // namespace qkv
