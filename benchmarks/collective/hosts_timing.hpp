#pragma once
// The timing loop of the all-reduce benchmarks between hosts, shared by mwstrat_bench_hosts (the ring) and
// mwstrat_bench_hosts_mpi (Open MPI), so both time the same thing the same way: per buffer size, 3 warm-up
// all-reduces, then `reps` times a barrier and one all-reduce (floats, sum, in place), each timed from the barrier's
// return to the all-reduce's; rank 0 prints "size=<bytes> median_s=<s> min_s=<s> reps=<n>" (hosts_bench.py reads it).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace hosts_bench {

// "a,b,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= s.size();) {
    const auto comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// A buffer size and its repetitions: "11534336:8", or "4096" (then `reps`).
struct size_reps {
  std::size_t bytes = 0;
  int reps = 0;
};
inline std::vector<size_reps> parse_sizes(const std::vector<std::string>& args, int reps) {
  std::vector<size_reps> out;
  for (const auto& s : args) {
    const auto colon = s.find(':');
    out.push_back({std::stoul(s.substr(0, colon)), colon == std::string::npos ? reps : std::stoi(s.substr(colon + 1))});
  }
  return out;
}

// The sizes, each timed as the file comment says; `barrier()` and `all_reduce(std::vector<float>&)` are the
// implementation's.
template <class Barrier, class AllReduce>
void time_all_reduces(const std::vector<size_reps>& sizes, int rank, Barrier&& barrier, AllReduce&& all_reduce) {
  for (const auto& [bytes, reps] : sizes) {
    std::vector<float> data(bytes / sizeof(float));
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<float>((i + static_cast<std::size_t>(rank)) % 97) * 0.01f;
    std::vector<double> times;
    for (int r = -3; r < reps; ++r) {
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      all_reduce(data);
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      if (r >= 0) times.push_back(dt.count());
    }
    std::sort(times.begin(), times.end());
    if (rank == 0 && !times.empty()) {
      std::printf("size=%zu median_s=%.9f min_s=%.9f reps=%d\n", bytes, times[times.size() / 2], times.front(), reps);
      std::fflush(stdout);
    }
  }
}

}  // namespace hosts_bench
