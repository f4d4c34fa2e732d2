// What this CPU can run, and which kernels qkv and its BLAS run on it.
//
// OpenBLAS picks its kernels (its "core") from the CPU model it knows. On a
// CPU newer than the installed OpenBLAS (Debian's 0.3.21 and a 2023 Xeon),
// it falls back to SSE3 kernels ("Prescott") that run matrix products about
// 4x slower, and says nothing. qkv compares that choice with the CPU's own
// feature flags: the qkv program restarts itself once with OPENBLAS_CORETYPE
// set (cli/main.cpp); a library user gets a one-line warning with
// the fix on the first matrix product.
#pragma once

#include <string>

namespace qkv::cpu {

/// The vector extensions that decide which kernels can run: x86-64's from
/// cpuid, aarch64's from the kernel's hardware capabilities (getauxval).
struct Features {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false;
  bool asimd = false, sve = false;  // aarch64: NEON (Advanced SIMD), and SVE (noted, not used)
  bool avx512() const { return avx512f && avx512dq && avx512bw && avx512vl; }
};

/// This CPU's (and OS's: AVX state saved) features.
Features features();

/// "avx512", "avx2" or "sse" on x86-64, "neon" or "neon+sve" on aarch64:
/// the best of the levels above this CPU has.
std::string level(const Features& f);

/// OpenBLAS's kernel set in this process ("Haswell", "SkylakeX", "Prescott", ...).
std::string blas_core();

/// The OPENBLAS_CORETYPE a CPU with features `f` should run when OpenBLAS
/// picked `core`: "SkylakeX" or "Haswell" when `core` has no AVX2 kernels
/// but the CPU has AVX-512 or AVX2; "" when OpenBLAS's own choice stands
/// (always on aarch64, where every core it has runs NEON kernels: its
/// generic ARMV8 ones are untuned, not a slower instruction set).
std::string better_blas_core(const std::string& core, const Features& f);

/// What OpenBLAS's aarch64 `core` is ("Neoverse N1 kernels", ...), or ""
/// for a name that is not one of its arm64 cores.
std::string arm_core_note(const std::string& core);

/// A one-line warning when this process runs weaker BLAS kernels than the
/// CPU could (naming the OPENBLAS_CORETYPE that fixes it), else "".
std::string blas_warning();

/// Prints blas_warning() to stderr the first time it is called with
/// something to say; the matrix-product ops call it once.
void warn_once_if_blas_is_slow();

/// One line for banners: "OpenBLAS kernels SkylakeX (chosen by qkv: OpenBLAS
/// took this CPU for Prescott), vector kernels avx512, CPU avx512".
std::string describe_kernels();

/// Set by the qkv program before it restarts with OPENBLAS_CORETYPE: the
/// core OpenBLAS had picked by itself, so describe_kernels() can say so.
constexpr const char* kReplacedCoreVariable = "QKV_OPENBLAS_REPLACED";

}  // namespace qkv::cpu
