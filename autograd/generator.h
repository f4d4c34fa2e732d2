// The one seedable random generator (xoshiro256**). Its whole state is four
// words, so a checkpoint can carry it and a run can resume bit-identically.
#pragma once

#include <array>
#include <cstdint>

namespace qkv {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }

  /// Restarts the stream: the same seed gives the same numbers.
  void manual_seed(uint64_t seed);

  uint64_t next_u64();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// Standard normal (Box-Muller; one draw uses two uniforms, nothing cached).
  double normal();
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n);

  using State = std::array<uint64_t, 4>;
  State state() const { return s_; }
  void set_state(const State& state) { s_ = state; }

 private:
  State s_{};
};

/// The generator used when an op is not given one.
Generator& default_generator();

/// Seeds the default generator.
void manual_seed(uint64_t seed);

}  // namespace qkv
