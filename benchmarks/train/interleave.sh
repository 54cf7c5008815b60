#!/usr/bin/env bash
# Interleaved A/B runs of train_throughput configurations: round 1 of every configuration, then round 2, ..., so a
# change of load on a shared machine hits all of them alike; prints each run's samples/s and each configuration's
# median. A configuration is LABEL=COMMAND (run with bash -c; its output must hold the chief's JSON line).
#   usage: benchmarks/train/interleave.sh ROUNDS LABEL=COMMAND...
#   e.g.   B=build/trainbench; P="$B/benchmarks/train/train_throughput --data-dir .cache/mnist --threads 1 --steps 300"
#          benchmarks/train/interleave.sh 5 "solo=$P" "sharded=$B/tools/mwstrat-launch -n 2 -- $P --update sharded" \
#              "mirrored=$B/tools/mwstrat-launch -n 2 -- $P --update mirrored"
set -euo pipefail
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"  # named in every output
rounds=${1:?usage: interleave.sh ROUNDS LABEL=COMMAND...}
shift
[[ $# -ge 1 ]] || { echo "usage: interleave.sh ROUNDS LABEL=COMMAND..." >&2; exit 2; }
declare -A results
echo "cpu: $cpu × $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for spec in "$@"; do
    label=${spec%%=*}
    cmd=${spec#*=}
    value=$(timeout 600 bash -c "$cmd" 2>&1 | grep -o '"samples_per_s":[0-9.]*' | head -1 | cut -d: -f2 || true)
    [[ -n $value ]] || value=failed
    results[$label]="${results[$label]:-} $value"
    echo "round $r $label $value"
  done
done
for spec in "$@"; do
  label=${spec%%=*}
  median=$(tr ' ' '\n' <<<"${results[$label]}" | { grep -E '^[0-9.]+$' || true; } | sort -n |
           awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "none"}')
  echo "$label:${results[$label]} — median $median"
done
