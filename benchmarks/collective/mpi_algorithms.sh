#!/usr/bin/env bash
# OpenMPI's all-reduce with its own choice of algorithm and with each tuned algorithm forced in turn
# (coll_tuned_use_dynamic_rules + coll_tuned_allreduce_algorithm), beside the ring over TCP, at >= 1 MiB: which
# algorithm its figures come close to, and how OpenMPI's own ring compares with ours.
# Usage: benchmarks/collective/mpi_algorithms.sh <build folder> [ranks, default 4]
# (a Release build with -DMWSTRAT_BUILD_BENCHMARKS=ON and OpenMPI from libopenmpi-dev openmpi-bin).
set -euo pipefail
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"  # named in every output
bin="${1:-build/release}/benchmarks/collective"
n="${2:-4}"
min=1048576
max=67108864
if [ ! -x "$bin/mwstrat_bench_collective_mpi" ] || ! command -v mpirun > /dev/null; then
  echo "mpi_algorithms.sh: no OpenMPI benchmark in $bin or no mpirun" >&2
  exit 2
fi
echo "== $cpu; load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, $n processes; bus bandwidth, GB/s"
echo "== mwstrat ring, TCP"
"$bin/mwstrat_bench_collective" --ranks "$n" --min "$min" --max "$max" --transport tcp |
  awk -v n="$n" '$1 == n && $2 == "tcp" { printf "%10s %6s\n", $3, $5 }'
# ompi_info names them: 3 recursive doubling, 4 ring, 5 segmented ring, 6 rabenseifner.
for alg in default 3 4 5 6; do
  if [ "$alg" = default ]; then
    echo "== OpenMPI, its own choice"
    set --
  else
    echo "== OpenMPI, coll_tuned_allreduce_algorithm $alg"
    set -- --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$alg"
  fi
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np "$n" --oversubscribe --bind-to none --mca btl tcp,self --mca btl_tcp_if_include lo "$@" \
    "$bin/mwstrat_bench_collective_mpi" "$min" "$max" | awk -v n="$n" '$1 == n { printf "%10s %6s\n", $2, $4 }'
done
