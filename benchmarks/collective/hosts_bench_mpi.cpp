// One rank of Open MPI's all-reduce timed as mwstrat_bench_hosts times its own (hosts_bench.py starts it under
// mpirun, across scripts/simhosts' simulated hosts or on 127.0.0.1): per buffer size, 3 warm-up all-reduces, then
// `reps` times a barrier and one MPI_Allreduce (float, sum, in place) timed from the barrier's return to the
// all-reduce's (hosts_timing.hpp, the loop both share). Rank 0 prints "size=<bytes> median_s=<s> min_s=<s> reps=<n>".
//
//   mpirun ... mwstrat_bench_hosts_mpi [--sizes 4096,11534336:8] [--reps 20]

#include "hosts_timing.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::string> size_args = {"4096", std::to_string(11u << 20)};
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--sizes") size_args = hosts_bench::split(v);
    else if (k == "--reps") reps = std::stoi(v);
    else {
      if (rank == 0) std::fprintf(stderr, "unknown option %s\n", k.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  hosts_bench::time_all_reduces(
      hosts_bench::parse_sizes(size_args, reps), rank, [] { MPI_Barrier(MPI_COMM_WORLD); },
      [](std::vector<float>& data) {
        MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
