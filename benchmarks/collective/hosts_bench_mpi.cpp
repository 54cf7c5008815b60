// One rank of Open MPI's all-reduce timed as mwstrat_bench_hosts times its own (hosts_bench.py starts it under
// mpirun, across scripts/simhosts' simulated hosts or on 127.0.0.1): per buffer size, 3 warm-up all-reduces, then
// `reps` times a barrier and one MPI_Allreduce (float, sum, in place) timed on rank 0 from the barrier's return to
// the all-reduce's. Rank 0 prints "size=<bytes> median_s=<s> min_s=<s> reps=<n>" per size.
//
//   mpirun ... mwstrat_bench_hosts_mpi [--sizes 4096,11534336:8] [--reps 20]

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= s.size();) {
    const auto comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::string> size_args = {"4096", std::to_string(11u << 20)};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--sizes") size_args = split(v);
    else if (k == "--reps") reps = std::stoi(v);
    else {
      if (rank == 0) std::fprintf(stderr, "unknown option %s\n", k.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  for (const auto& s : size_args) {
    const auto colon = s.find(':');
    const std::size_t bytes = std::stoul(s.substr(0, colon));
    const int size_reps = colon == std::string::npos ? reps : std::stoi(s.substr(colon + 1));
    std::vector<float> data(bytes / sizeof(float));
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<float>((i + static_cast<std::size_t>(rank)) % 97) * 0.01f;
    const int count = static_cast<int>(data.size());
    std::vector<double> times;
    for (int r = -3; r < size_reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double dt = MPI_Wtime() - t0;
      if (r >= 0) times.push_back(dt);
    }
    std::sort(times.begin(), times.end());
    if (rank == 0) {
      std::printf("size=%zu median_s=%.9f min_s=%.9f reps=%d\n", bytes, times[times.size() / 2], times.front(),
                  size_reps);
      std::fflush(stdout);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
