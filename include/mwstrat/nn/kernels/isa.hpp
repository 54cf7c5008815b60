#pragma once
/// \file
/// Which instruction set the layers and kernels run on, chosen once per process for the CPU at hand.
///
/// The nn compute (layers, convolution and GEMM kernels: nn/detail/kernel_isas.hpp) is compiled into every program
/// for each ISA below, whatever the program's own compiler flags, and the best one the running CPU supports is
/// used: a plain `-O3` build runs the AVX-512 or AVX2 kernels a `-march=native` build would. The choice is made at
/// the first call of `kernel_isa_in_use()` (the first layer made), from the CPU's features (cpuid, and the operating
/// system's support for the wide registers), or from `MWSTRAT_KERNEL_ISA` where that is set:
///
///   | value      | kernels                                                              |
///   |------------|----------------------------------------------------------------------|
///   | `avx512`   | 64-byte vectors, 32 registers (AVX-512 F/BW/DQ/VL, with AVX2 and FMA) |
///   | `avx2`     | 32-byte vectors, 16 registers, FMA (x86-64-v3)                        |
///   | `baseline` | the program's own flags (SSE2 on a plain x86-64 build)               |
///   | `native`   | the program's own flags, when they are at least the best above (-march=native) |
///
/// A request the CPU cannot run is a `config_error` naming the CPU and its features, never an illegal instruction.
/// A program built for a wider ISA than the request (`-march=native` on an AVX-512 machine asked for `avx2`) cannot
/// narrow its own code: that is a `config_error` too. Compilers without GCC's target pragmas (and targets other
/// than x86-64) have the program's own flags only.

#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

// MWSTRAT_KERNEL_DISPATCH: 1 where the extra ISAs are compiled in (GCC on x86-64; clang lacks the target pragma
// that applies to every function of a region, templates and lambdas included). MWSTRAT_NO_KERNEL_DISPATCH=1 before
// the first include turns it off (a program that wants its own flags' kernels only, and the shorter compile).
#if !defined(MWSTRAT_KERNEL_DISPATCH)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(MWSTRAT_NO_KERNEL_DISPATCH)
#define MWSTRAT_KERNEL_DISPATCH 1
#else
#define MWSTRAT_KERNEL_DISPATCH 0
#endif
#endif

// What the program's own flags give (the ISA of the code outside the dispatched regions).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    defined(__FMA__)
#define MWSTRAT_BUILD_ISA_LEVEL 2
#elif defined(__AVX2__) && defined(__FMA__)
#define MWSTRAT_BUILD_ISA_LEVEL 1
#else
#define MWSTRAT_BUILD_ISA_LEVEL 0
#endif

namespace mwstrat::nn {

/// The kernels' instruction sets, in increasing order of width.
enum class kernel_isa : std::uint8_t {
  build,   ///< the program's own compiler flags
  avx2,    ///< AVX2 + FMA, 32-byte vectors
  avx512,  ///< AVX-512 F/BW/DQ/VL, 64-byte vectors
};

/// What runs, as reported once by the chief: `kernels: avx2+fma (AMD EPYC 7B13)`.
struct kernel_isa_report {
  kernel_isa isa = kernel_isa::build;
  std::string name;          ///< "avx512", "avx2+fma", "baseline (sse2)" or "native (avx512)"
  std::string cpu;           ///< the CPU's brand string
  std::string cpu_features;  ///< the features the choice looked at, those the CPU has
  [[nodiscard]] std::string line() const { return "kernels: " + name + " (" + cpu + ")"; }
};

}  // namespace mwstrat::nn

namespace mwstrat::detail {

// The ISA levels: 0 baseline, 1 AVX2 + FMA, 2 AVX-512.
inline constexpr int build_isa_level = MWSTRAT_BUILD_ISA_LEVEL;

struct cpu_isa_support {
  bool avx2_fma = false;
  bool avx512 = false;
  std::string features;  // those of the features below that the CPU has, space-separated
};

inline cpu_isa_support detect_cpu_isa() {
  cpu_isa_support s;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the operating system saves the wide registers (XCR0).
  __builtin_cpu_init();
  const auto has = [&s](bool present, const char* name) {
    if (present) {
      // appended piecewise: GCC 12 at -O3 reports a false -Wrestrict on `const char* + std::string&&`
      if (!s.features.empty()) s.features += ' ';
      s.features += name;
    }
    return present;
  };
  const bool avx2 = has(__builtin_cpu_supports("avx2"), "avx2");
  const bool fma = has(__builtin_cpu_supports("fma"), "fma");
  const bool f = has(__builtin_cpu_supports("avx512f"), "avx512f");
  const bool bw = has(__builtin_cpu_supports("avx512bw"), "avx512bw");
  const bool dq = has(__builtin_cpu_supports("avx512dq"), "avx512dq");
  const bool vl = has(__builtin_cpu_supports("avx512vl"), "avx512vl");
  s.avx2_fma = avx2 && fma;
  s.avx512 = s.avx2_fma && f && bw && dq && vl;
#endif
  if (s.features.empty()) s.features = "none of avx2 fma avx512f/bw/dq/vl";
  return s;
}

inline std::string cpu_brand() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned top = 0, b = 0, c = 0, d = 0;
  __get_cpuid(0x80000000u, &top, &b, &c, &d);
  if (top >= 0x80000004u) {
    std::array<unsigned, 12> words{};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &words[4 * i], &words[4 * i + 1], &words[4 * i + 2], &words[4 * i + 3]);
    }
    char text[49] = {};
    std::memcpy(text, words.data(), 48);
    std::string s(text);
    const auto first = s.find_first_not_of(' ');
    const auto last = s.find_last_not_of(' ');
    if (first != std::string::npos) return s.substr(first, last - first + 1);
  }
#endif
  return "unknown CPU";
}

inline const char* build_isa_name() {
  return build_isa_level == 2 ? "avx512" : build_isa_level == 1 ? "avx2+fma" : "sse2";
}

// The choice for this CPU and this request (`requested`: MWSTRAT_KERNEL_ISA's value, empty when unset). A pure
// function of its inputs, so tests can ask it about CPUs they do not run on.
inline nn::kernel_isa_report choose_kernel_isa(std::string_view requested, const cpu_isa_support& cpu,
                                               const std::string& brand, bool dispatch = MWSTRAT_KERNEL_DISPATCH) {
  nn::kernel_isa_report r;
  r.cpu = brand;
  r.cpu_features = cpu.features;
  const int best = cpu.avx512 ? 2 : cpu.avx2_fma ? 1 : 0;
  const auto refuse = [&](const std::string& why) -> nn::kernel_isa_report {
    throw config_error({"nn"}, "MWSTRAT_KERNEL_ISA=" + std::string(requested) + ": " + why + " (CPU: " + brand +
                                   "; features: " + cpu.features + ")");
  };
  const auto at_level = [&](int level) {
    if (level <= build_isa_level) {
      r.isa = nn::kernel_isa::build;
      r.name = level == build_isa_level && level > 0 ? std::string("native (") + build_isa_name() + ")"
                                                     : std::string("baseline (") + build_isa_name() + ")";
      if (build_isa_level == 0) r.name = "baseline (sse2)";
    } else {
      r.isa = level == 2 ? nn::kernel_isa::avx512 : nn::kernel_isa::avx2;
      r.name = level == 2 ? "avx512" : "avx2+fma";
    }
    return r;
  };
  int level = -1;
  if (requested.empty()) {
    level = dispatch ? std::max(best, build_isa_level) : build_isa_level;
    return at_level(level);
  }
  if (requested == "baseline" || requested == "native") {
    if (requested == "native" && build_isa_level < best && dispatch)
      refuse(std::string("this program is built for ") + build_isa_name() +
             ", below what this CPU runs; ask for avx2 or avx512, or build with -march=native");
    return at_level(build_isa_level);
  }
  if (requested == "avx2") level = 1;
  else if (requested == "avx512") level = 2;
  else refuse("expected avx512, avx2, baseline or native");
  if (level > best) refuse("this CPU cannot run it");
  if (level < build_isa_level)
    refuse(std::string("this program is built for ") + build_isa_name() +
           " (-march) and cannot run narrower kernels; build without -march to choose at run time");
  if (level > build_isa_level && !dispatch)
    refuse(std::string("this build has only its own flags' kernels (") + build_isa_name() +
           "): GCC on x86-64 compiles the others in");
  return at_level(level);
}

// The choice, made once (thread-safe static); a bad MWSTRAT_KERNEL_ISA is thrown at each call until it is fixed.
inline const nn::kernel_isa_report& kernel_isa_choice() {
  static const nn::kernel_isa_report chosen = [] {
    const std::optional<std::string> v = environment{}.get("MWSTRAT_KERNEL_ISA");
    return choose_kernel_isa(v ? std::string_view(*v) : std::string_view{}, detect_cpu_isa(), cpu_brand());
  }();
  return chosen;
}

}  // namespace mwstrat::detail

namespace mwstrat::nn {

/// The kernels this process runs (chosen at the first call; see the file comment). Throws `config_error` when
/// MWSTRAT_KERNEL_ISA asks for what cannot run here.
[[nodiscard]] inline const kernel_isa_report& kernel_isa_in_use() { return ::mwstrat::detail::kernel_isa_choice(); }

}  // namespace mwstrat::nn
