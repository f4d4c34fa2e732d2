// Region profile: where a step's time goes, region by region, so that what
// stops a step from scaling with threads can be read off two runs (`qkv bench
// --profile 2,16`). perf shows where cycles go; this shows which serial or
// badly split regions the other threads wait on, on machines without perf.
//
// A region is one top-level parallel_for call site or one matrix product.
// Regions nested in another (a product inside an attention loop, a loop
// inside a parallel region) count as part of the enclosing one. Off, a
// region costs one relaxed atomic load.
#pragma once

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

namespace qkv::profile {

/// One region's totals over a profiled stretch.
struct Region {
  std::string name;  // "sgemm 1024x512x128 NT own", "loop adam (optimizer.cpp:212)", ...
  double seconds = 0;
  int64_t calls = 0;
  int64_t forked = 0;  // calls that ran on more than one thread
  int64_t items = 0;   // loops: items over all calls (a call splits into at most its items)
};

/// Clears the totals and starts timing regions (on the calling thread, the
/// one that runs the model).
void start();
/// Stops timing; returns the totals, largest first.
std::vector<Region> stop();

namespace detail {
inline std::atomic<bool> active{false};
inline thread_local int depth = 0;  // recorded regions open on this thread
struct Site;
void record(const Site& site, double seconds);
}  // namespace detail

/// What a region is, named only when it is recorded.
struct detail::Site {
  enum Kind { Loop, Product } kind = Loop;
  std::source_location where{};  // Loop: its call site
  int64_t items = 0;             // Loop: what it splits (the most threads it can use)
  char type = 's';               // Product: 's' float32, 'd' float64
  bool ta = false, tb = false;
  int64_t n = 0, m = 0, k = 0;
  const char* path = "";  // Product: who computed it
  bool forked = false;    // whether it ran on more than one thread
};

/// Times the enclosing scope as one region while profiling is on and no
/// recorded region encloses it.
class Scope {
 public:
  /// A parallel_for call over `items`; `forked`: whether this call runs on more than one thread.
  Scope(const std::source_location& where, int64_t items, bool forked) {
    if (open()) site_ = {.kind = detail::Site::Loop, .where = where, .items = items, .forked = forked};
  }
  /// A matrix product C[n, m] = op(A)[n, k]·op(B)[k, m]; set_path says who computes it.
  Scope(char type, bool ta, bool tb, int64_t n, int64_t m, int64_t k) {
    if (open()) site_ = {.kind = detail::Site::Product, .type = type, .ta = ta, .tb = tb, .n = n, .m = m, .k = k};
  }
  void set_path(const char* path, bool forked) { site_.path = path, site_.forked = forked; }
  ~Scope() {
    if (!recording_) return;
    --detail::depth;
    detail::record(site_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool open() {
    recording_ = detail::active.load(std::memory_order_relaxed) && detail::depth == 0 && !omp_in_parallel();
    if (recording_) {
      ++detail::depth;
      start_ = std::chrono::steady_clock::now();
    }
    return recording_;
  }
  bool recording_ = false;
  std::chrono::steady_clock::time_point start_;
  detail::Site site_;
};

}  // namespace qkv::profile
