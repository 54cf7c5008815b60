#!/usr/bin/env bash
# Runs the ring benchmark and, where built, Gloo's and OpenMPI's all-reduce on loopback, one after another,
# for 2 and 4 processes. Usage: benchmarks/collective/compare.sh <build folder> (a Release build with
# -DMWSTRAT_BUILD_BENCHMARKS=ON; Gloo from libgloo-dev, OpenMPI from libopenmpi-dev openmpi-bin).
set -euo pipefail
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"  # named in every output
bin="${1:-build/release}/benchmarks/collective"
echo "== $cpu; load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
echo "== mwstrat ring_collective"
"$bin/mwstrat_bench_collective" --ranks 2,4  # tcp and shm rows
if [ -x "$bin/mwstrat_bench_collective_gloo" ]; then
  echo "== Gloo allreduce (ring, TCP transport)"
  "$bin/mwstrat_bench_collective_gloo" --ranks 2,4
fi
if [ -x "$bin/mwstrat_bench_collective_mpi" ] && command -v mpirun > /dev/null; then
  for n in 2 4; do
    echo "== OpenMPI MPI_Allreduce, $n processes, --mca btl tcp,self"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np "$n" --oversubscribe --bind-to none --mca btl tcp,self --mca btl_tcp_if_include lo \
      "$bin/mwstrat_bench_collective_mpi"
  done
fi
