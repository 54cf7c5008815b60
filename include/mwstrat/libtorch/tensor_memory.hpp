#pragma once
/// \file
/// Keeps a libtorch training process from handing each step's freed tensors back to the kernel.
///
/// libtorch's CPU tensors come from malloc. With glibc's defaults, a step's activations (megabytes each) are either
/// mapped fresh and unmapped when freed (below the dynamic mmap threshold's first raise), or taken from the heap and
/// trimmed off its top when freed (the trim threshold follows the mmap threshold): every step then faults its
/// activations in again, page by page. Which of the two a process gets depends on the order of its first large
/// frees, so a run may pay it and the next not. Measured on the MNIST CNN, 2 cores (benchmarks/RESULTS.md, "DDP for
/// libtorch"): 13-26 ms of kernel time per step out of 45-93, and two workers kept 71% of one worker's samples per
/// CPU second with it, 86-90% without. The cure is to pin both thresholds, as M_MMAP_THRESHOLD / M_TRIM_THRESHOLD
/// allow: a block under 32 MiB comes from the heap, and up to 64 MiB of free heap top is kept for the next step.
/// (The memory then stays with the process: a training process reuses it at once.)
///
/// `module_model` does this once per process when it is built. Left alone (`pinned == false`, with why): another C
/// library than glibc; `MWSTRAT_LIBTORCH_MALLOC=default`; or thresholds the user chose already (`GLIBC_TUNABLES`
/// naming `malloc.mmap_threshold` or `malloc.trim_threshold`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`).

#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/error.hpp>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>

namespace mwstrat::libtorch {

/// The thresholds pinned: a block below `mmap_threshold` comes from the heap; a free heap top below
/// `trim_threshold` is kept.
inline constexpr std::size_t tensor_mmap_threshold = std::size_t{32} << 20;
inline constexpr std::size_t tensor_trim_threshold = std::size_t{64} << 20;

/// What `keep_tensor_memory` did: pinned the thresholds, or left them, and why.
struct tensor_memory_setting {
  bool pinned = false;
  std::string why;
};

/// Pins glibc's malloc thresholds for a process that trains with libtorch (see the file comment), unless the
/// environment says otherwise. Throws config_error naming MWSTRAT_LIBTORCH_MALLOC when it is neither "keep" nor
/// "default".
inline tensor_memory_setting keep_tensor_memory(const environment& env = environment{}) {
  if (const auto v = env.get("MWSTRAT_LIBTORCH_MALLOC"); v && *v != "keep") {
    if (*v != "default")
      throw config_error({"libtorch"},
                         "MWSTRAT_LIBTORCH_MALLOC is '" + *v + "', expected 'keep' (the default) or 'default'");
    return {false, "MWSTRAT_LIBTORCH_MALLOC=default"};
  }
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"})
    if (env.get(name)) return {false, std::string(name) + " is set"};
  if (const auto t = env.get("GLIBC_TUNABLES");
      t && (t->find("malloc.mmap_threshold") != std::string::npos ||
            t->find("malloc.trim_threshold") != std::string::npos))
    return {false, "GLIBC_TUNABLES sets a malloc threshold"};
#ifdef __GLIBC__
  const bool mmap_ok = ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(tensor_mmap_threshold)) == 1;
  const bool trim_ok = ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(tensor_trim_threshold)) == 1;
  if (!mmap_ok || !trim_ok) return {false, "glibc refused the thresholds (mallopt)"};
  return {true, "mmap threshold 32 MiB, trim threshold 64 MiB"};
#else
  return {false, "not glibc"};
#endif
}

}  // namespace mwstrat::libtorch

namespace mwstrat::detail {
// Once per process, from the first libtorch::module_model built (later ones find it done).
inline const libtorch::tensor_memory_setting& keep_tensor_memory_once() {
  static std::once_flag once;
  static libtorch::tensor_memory_setting setting;
  std::call_once(once, [] { setting = libtorch::keep_tensor_memory(); });
  return setting;
}
}  // namespace mwstrat::detail
