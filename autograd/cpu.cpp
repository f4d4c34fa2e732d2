#include "autograd/cpu.h"

#include <cblas.h>

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "autograd/error.h"
#include "autograd/simd.h"

namespace qkv::cpu {

Features features() {
  Features f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
#elif defined(__aarch64__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  f.asimd = (hwcap & HWCAP_ASIMD) != 0;
  f.sve = (hwcap & HWCAP_SVE) != 0;
#endif
  return f;
}

std::string level(const Features& f) {
  if (f.asimd) return f.sve ? "neon+sve" : "neon";
  if (f.avx512() && f.fma) return "avx512";
  if (f.avx2 && f.fma) return "avx2";
  return "sse";
}

std::string blas_core() {
  const char* name = openblas_get_corename();
  return name ? printable(name, 40) : "unknown";
}

namespace {
// The arm64 cores of Debian's OpenBLAS 0.3.21 (its DYNAMIC_ARCH list), as openblas_get_corename() names them.
struct ArmCore {
  const char* name;
  const char* what;
};
constexpr ArmCore kArmCores[] = {
    {"armv8", "generic ARMv8 kernels: OpenBLAS does not know this CPU's model"},
    {"cortexa53", "Cortex-A53 kernels"},
    {"cortexa55", "Cortex-A55 kernels"},
    {"cortexa57", "Cortex-A57 kernels"},
    {"cortexa72", "Cortex-A72 kernels"},
    {"cortexa73", "Cortex-A73 kernels"},
    {"neoversen1", "Neoverse N1 kernels (Graviton 2, Ampere Altra)"},
    {"neoversen2", "Neoverse N2 kernels"},
    {"neoversev1", "Neoverse V1 kernels (Graviton 3)"},
    {"thunderx", "ThunderX kernels"},
    {"thunderx2t99", "ThunderX2 kernels"},
    {"thunderx3t110", "ThunderX3 kernels"},
    {"tsv110", "TaiShan v110 kernels (Kunpeng 920)"},
    {"emag8180", "eMAG kernels"},
    {"falkor", "Falkor kernels"},
};
}  // namespace

std::string arm_core_note(const std::string& core) {
  for (const ArmCore& c : kArmCores)
    if (strcasecmp(core.c_str(), c.name) == 0) return c.what;
  return "";
}

std::string better_blas_core(const std::string& core, const Features& f) {
  if (f.asimd) return "";  // aarch64: no core of OpenBLAS's is a slower instruction set (header)
  // OpenBLAS 0.3.21's cores with AVX2 (or better) kernels; any other core on
  // such a CPU is a fallback (Prescott, Nehalem, Sandybridge, ...). A known
  // AVX2 core on an AVX-512 CPU (Zen on Zen 4) is OpenBLAS's considered
  // choice and stands.
  for (const char* good : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(core.c_str(), good) == 0) return "";
  if (f.avx512() && f.fma) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

std::string blas_warning() {
  Features f = features();
  std::string core = blas_core(), better = better_blas_core(core, f);
  if (better.empty()) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const bool obeyed = forced && strcasecmp(forced, core.c_str()) == 0;  // else ignored: not a core it knows
  return cat("qkv: warning: OpenBLAS runs its ", core, " kernels on a CPU with ", level(f),
             obeyed ? cat(" (OPENBLAS_CORETYPE=", printable(forced, 40), " is set)")
                    : std::string(" (it does not know this CPU)"),
             ", so matrix products run several times slower; start with OPENBLAS_CORETYPE=", better,
             " (the qkv program does this itself)");
}

void warn_once_if_blas_is_slow() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::string w = blas_warning();
    if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
  });
}

std::string describe_kernels() {
  const Features f = features();
  const std::string core = blas_core();
  std::string out = "OpenBLAS kernels " + core;
  if (const char* replaced = std::getenv(kReplacedCoreVariable); replaced && *replaced)
    out += cat(" (chosen by qkv: OpenBLAS took this CPU for ", printable(replaced, 40), ")");
  else if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced)
    // OpenBLAS ignores a name it does not know and picks as if it were unset: say which happened.
    out += strcasecmp(forced, core.c_str()) == 0
               ? std::string(" (OPENBLAS_CORETYPE)")
               : cat(" (OPENBLAS_CORETYPE=", printable(forced, 40), " names no core it knows: ignored)");
  if (!better_blas_core(core, f).empty()) out += " [slow: see the warning]";
  if (const std::string note = f.asimd ? arm_core_note(core) : ""; !note.empty()) out += cat(" (", note, ")");
  return cat(out, ", vector kernels ", simd::isa_name(simd::active_isa()), ", CPU ", level(f));
}

}  // namespace qkv::cpu
