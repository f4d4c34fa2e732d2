// The CUDA backend's memory: a caching allocator over plain cudaMalloc (never
// managed memory), copies on the device's one stream (small ones from the
// host staged through pinned memory, so they do not wait), and the figures
// `qkv bench --device cuda` prints.
#include "autograd/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "autograd/cuda/runtime.h"
#include "autograd/error.h"

namespace qkv::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a sticky-free error so the next call can report its own
  throw Error(cat("CUDA: ", what, ": ", cudaGetErrorString(status)));
}

DeviceGuard::DeviceGuard(int index) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

namespace {

// cudaFree on device `index`, for paths that must not throw (a tensor's
// storage is freed in a destructor): errors are dropped, and cleared so that
// the next call does not report them as its own.
void free_on(int index, void* p) noexcept {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(index);
  cudaFree(p);
  cudaSetDevice(previous);
  cudaGetLastError();
}

// Freed blocks wait, by rounded size, for the next request of that size: a
// training step asks for the same shapes every step, and cudaMalloc and
// cudaFree synchronise the whole device. All work runs on the legacy default
// stream, so a block freed here is reused only by work queued after the work
// that used it. When cudaMalloc fails, the cache is given back and it tries once more
// (as cuBLAS's calls do, through release_cache()). in_use and peak count the
// bytes tensors asked for; the cache holds blocks by rounded size.
// QKV_CUDA_NO_CACHE=1 allocates each block at its exact size and frees it at
// once, so that compute-sanitizer's memcheck sees every overrun and every use
// after free (as the CPU's cache is off under AddressSanitizer).
class CudaBackend final : public DeviceBackend {
 public:
  int count() override {
    std::call_once(counted_, [&] {
      int n = 0;
      cudaError_t status = cudaGetDeviceCount(&n);
      count_ = status == cudaSuccess ? n : 0;
      if (status != cudaSuccess) count_error_ = cudaGetErrorString(status);
      cudaGetLastError();  // no driver or no GPU is an answer (0), not an error
      pools_.resize(count_);
    });
    return count_;
  }
  const std::string& count_error() {
    count();
    return count_error_;
  }

  void* allocate(std::size_t bytes, int index) override {
    Pool& pool = pools_.at(index);
    if (no_cache_) {
      DeviceGuard on(index);
      void* p = nullptr;
      cudaError_t status = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
      if (status != cudaSuccess) cudaGetLastError();  // cleared: the next launch must not report it as its own
      QKV_CHECK(status == cudaSuccess, "cuda:", index, ": cannot allocate ", bytes,
                " bytes: ", cudaGetErrorString(status));
      std::lock_guard<std::mutex> lock(mutex_);
      pool.in_use += bytes;
      pool.peak = std::max(pool.peak, pool.in_use);
      return p;
    }
    std::size_t rounded = round(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = nullptr;
    auto it = pool.free.find(rounded);
    if (it != pool.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      pool.cached -= rounded;
    } else {
      DeviceGuard on(index);
      if (cudaMalloc(&p, rounded) != cudaSuccess) {
        cudaGetLastError();
        release_cache(pool);
        cudaError_t again = cudaMalloc(&p, rounded);
        if (again != cudaSuccess) cudaGetLastError();
        QKV_CHECK(again == cudaSuccess, "cuda:", index, ": cannot allocate ", bytes, " bytes (", pool.in_use,
                  " in use by tensors): ", cudaGetErrorString(again));
      }
    }
    pool.in_use += bytes;
    pool.peak = std::max(pool.peak, pool.in_use);
    return p;
  }

  void release(void* p, std::size_t bytes, int index) override {  // called by destructors: never throws
    Pool& pool = pools_.at(index);
    std::size_t rounded = no_cache_ ? bytes : round(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    pool.in_use -= bytes;
    if (no_cache_ || pool.cached + rounded > kMaxCached) {  // back to the driver (cudaFree waits for the device)
      free_on(index, p);
      return;
    }
    pool.free[rounded].push_back(p);
    pool.cached += rounded;
  }

  void copy_from_host(void* dst, const void* src, std::size_t bytes, int index) override {
    if (!bytes) return;
    DeviceGuard on(index);
    if (bytes <= kStagingSlot) return stage(dst, src, bytes, index);
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to the device");
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, int index) override {
    if (!bytes) return;
    DeviceGuard on(index);
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
          "copy from the device");  // waits for the kernels before it
  }
  void copy_within(void* dst, const void* src, std::size_t bytes, int index) override {
    if (!bytes) return;
    DeviceGuard on(index);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "copy on the device");
  }
  void fill_zero(void* p, std::size_t bytes, int index) override {
    if (!bytes) return;
    DeviceGuard on(index);
    check(cudaMemsetAsync(p, 0, bytes, 0), "cudaMemsetAsync");
  }
  void synchronize(int index) override {
    DeviceGuard on(index);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  DeviceMemory memory(int index) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const Pool& pool = pools_.at(index);
    return {pool.in_use, pool.peak, pool.cached};
  }
  void reset_peak(int index) override {
    std::lock_guard<std::mutex> lock(mutex_);
    pools_.at(index).peak = pools_.at(index).in_use;
  }
  void release_cache(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard on(index);
    release_cache(pools_.at(index));
  }
  std::string describe(int index) override {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    return cat(prop.name, ", compute capability ", prop.major, ".", prop.minor, ", ", prop.multiProcessorCount,
               " multiprocessors, ", prop.totalGlobalMem >> 20, " MiB");
  }

 private:
  struct Pool {
    std::map<std::size_t, std::vector<void*>> free;
    std::size_t in_use = 0, peak = 0, cached = 0;
  };

  // cudaMemcpy from pageable host memory waits for all the work queued on
  // the device first: a batch's ids copied over each step would stop the
  // host there. So a copy of up to kStagingSlot bytes goes through one of
  // kStagingSlots slots of pinned memory, taken in turn: memcpy into the
  // slot, an asynchronous copy from it queued after the work before it, an
  // event recorded after that; a slot is written again only once its last
  // copy's event has passed (long since, kStagingSlots copies later).
  static constexpr std::size_t kStagingSlot = std::size_t{4} << 20;
  static constexpr int kStagingSlots = 8;
  struct Staging {
    bool unavailable = false;  // cudaHostAlloc failed: copies go straight from pageable memory (they wait)
    char* pinned = nullptr;
    cudaEvent_t done[kStagingSlots] = {};
    int next = 0;
  };

  void stage(void* dst, const void* src, std::size_t bytes, int index) {
    std::lock_guard<std::mutex> lock(staging_mutex_);
    if (static_cast<int>(staging_.size()) <= index) staging_.resize(index + 1);
    Staging& s = staging_[index];
    if (!s.pinned && !s.unavailable) {
      void* p = nullptr;
      // Pinned memory is a speed-up, not a need: where the host cannot pin 32 MiB, copies wait instead.
      if (cudaHostAlloc(&p, kStagingSlot * kStagingSlots, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        s.unavailable = true;
      } else {
        for (cudaEvent_t& e : s.done) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
        s.pinned = static_cast<char*>(p);
      }
    }
    if (s.unavailable) return check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to the device");
    const int slot = s.next;
    s.next = (slot + 1) % kStagingSlots;
    check(cudaEventSynchronize(s.done[slot]), "copy to the device");  // the slot's last copy has been read
    char* buffer = s.pinned + slot * kStagingSlot;
    std::memcpy(buffer, src, bytes);
    check(cudaMemcpyAsync(dst, buffer, bytes, cudaMemcpyHostToDevice, 0), "copy to the device");
    check(cudaEventRecord(s.done[slot], 0), "copy to the device");
  }

  static constexpr std::size_t kMaxCached = std::size_t{4} << 30;  // freed bytes kept per device, at most

  // 512-byte steps below 1 MiB, 2 MiB steps above: few distinct sizes, little waste.
  static std::size_t round(std::size_t bytes) {
    std::size_t unit = bytes >= (1 << 20) ? (2 << 20) : 512;
    return std::max<std::size_t>((bytes + unit - 1) / unit * unit, unit);
  }

  static void release_cache(Pool& pool) {
    cudaDeviceSynchronize();
    for (auto& [size, blocks] : pool.free)
      for (void* p : blocks) cudaFree(p);
    cudaGetLastError();  // dropped: the caller retries and reports its own
    pool.free.clear();
    pool.cached = 0;
  }

  const bool no_cache_ = [] {
    const char* v = std::getenv("QKV_CUDA_NO_CACHE");
    return v && *v && std::string(v) != "0";
  }();
  std::mutex staging_mutex_;
  std::vector<Staging> staging_;  // by device; never freed, like the handles (see the_backend())
  std::once_flag counted_;
  int count_ = 0;
  std::string count_error_;
  std::mutex mutex_;
  std::vector<Pool> pools_;
};

// Never destroyed: tensors in static objects may outlive any destructor, and
// the CUDA runtime may be torn down before them; the driver frees all at exit.
CudaBackend& the_backend() {
  static CudaBackend* instance = new CudaBackend;
  return *instance;
}

}  // namespace

DeviceBackend& backend() { return the_backend(); }

std::string count_error() { return the_backend().count_error(); }

void release_cache(int index) { the_backend().release_cache(index); }

}  // namespace qkv::cuda
