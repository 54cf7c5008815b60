// OpenMPI's MPI_Allreduce (float, sum) for the same sizes; run it under mpirun, restricted to TCP:
//   mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo \
//          mwstrat_bench_collective_mpi [min_bytes max_bytes]

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t min_bytes = argc > 2 ? strtoul(argv[1], NULL, 10) : 4096;
  size_t max_bytes = argc > 2 ? strtoul(argv[2], NULL, 10) : ((size_t)64 << 20);
  size_t sizes[32];
  int count_sizes = 0;
  for (size_t b = min_bytes; b <= max_bytes && count_sizes < 31; b *= 4) sizes[count_sizes++] = b;
  if (max_bytes >= ((size_t)11 << 20)) {  // the reference CNN's gradient, in order
    int at = count_sizes++;
    while (at > 0 && sizes[at - 1] > ((size_t)11 << 20)) {
      sizes[at] = sizes[at - 1];
      --at;
    }
    sizes[at] = (size_t)11 << 20;
  }
  float* data = (float*)calloc(max_bytes / sizeof(float) + 1, sizeof(float));
  if (rank == 0) printf("%-8s %12s %12s %14s\n", "ranks", "bytes", "time_us", "busbw_GB/s");
  for (int s = 0; s < count_sizes; ++s) {
    const int count = (int)(sizes[s] / sizeof(float));
    for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double iters = 0.5 / (MPI_Wtime() - t0 + 1e-9);
    if (iters < 5) iters = 5;
    if (iters > 20000) iters = 20000;
    MPI_Bcast(&iters, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < (long)iters; ++i)
      MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double per = (MPI_Wtime() - t0) / (double)(long)iters;
    MPI_Allreduce(MPI_IN_PLACE, &per, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      printf("%-8d %12zu %12.1f %14.2f\n", n, sizes[s], per * 1e6, (double)sizes[s] * 2.0 * (n - 1) / n / per / 1e9);
    fflush(stdout);
  }
  free(data);
  MPI_Finalize();
  return 0;
}
