#pragma once
// The facts that say which machine (kernel instance) a process runs on, read in one place: the shared-memory
// handshake (collective/ring) and the CPU-load decision (strategy) both start from them.

#include <mwstrat/detail/platform.hpp>

#include <unistd.h>

#include <array>
#include <fstream>
#include <iterator>
#include <string>

namespace mwstrat::detail {

/// The running kernel's boot id (random per boot): processes with equal ids share CPUs and may share memory,
/// containers on one kernel included, whatever their hostnames. Empty where /proc is not mounted.
inline std::string kernel_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// This machine's host name (empty if it cannot be read).
inline std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return {};
  return name.data();
}

}  // namespace mwstrat::detail
