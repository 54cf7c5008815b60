#!/usr/bin/env bash
# Interleaved A/B runs of benchmark programs that print one JSON line with "samples_per_s" (and "cpu_s_per_step":
# train_throughput, resnet_throughput, under mwstrat-launch or alone): round 1 of every configuration, then round
# 2, ..., so a change of load on a shared machine hits all of them alike. Prints each run's samples/s and CPU
# seconds per step, each configuration's medians, and for every pair LABEL_A / LABEL_B the median of the rounds' own
# ratios B ÷ A, by wall clock and per CPU second (the steadier figure where other work shares the cores).
# A configuration is LABEL=COMMAND (run with bash -c; its output must hold the chief's JSON line).
#   usage: benchmarks/train/interleave.sh ROUNDS LABEL=COMMAND...
#   e.g.   B=build/trainbench; P="$B/benchmarks/train/train_throughput --data-dir .cache/mnist --threads 1 --steps 300"
#          benchmarks/train/interleave.sh 5 "solo=$P" "sharded=$B/tools/mwstrat-launch -n 2 -- $P --update sharded" \
#              "mirrored=$B/tools/mwstrat-launch -n 2 -- $P --update mirrored"
#          benchmarks/train/interleave.sh 10 "two_A=$A/tools/mwstrat-launch -n 2 -- $A/$P" "two_B=…"   # an A/B
set -euo pipefail
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"  # named in every output
rounds=${1:?usage: interleave.sh ROUNDS LABEL=COMMAND...}
shift
[[ $# -ge 1 ]] || { echo "usage: interleave.sh ROUNDS LABEL=COMMAND..." >&2; exit 2; }
declare -A wall cpus
field() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2 || true; }
median() {  # of the numbers among its words; "none" when there are none
  tr ' ' '\n' <<<"$1" | { grep -E '^[0-9.]+$' || true; } | sort -g |
    awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "none"}'
}
echo "cpu: $cpu × $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for spec in "$@"; do
    label=${spec%%=*}
    out=$(timeout 600 bash -c "${spec#*=}" 2>&1 | grep -m1 '"samples_per_s"' || true)
    value=$(field samples_per_s <<<"$out")
    cpu_s=$(field cpu_s_per_step <<<"$out")
    wall[$label]="${wall[$label]:-} ${value:-failed}"
    cpus[$label]="${cpus[$label]:-} ${cpu_s:-none}"
    echo "round $r $label ${value:-failed} samples/s, ${cpu_s:-?} CPU s per step"
  done
done
for spec in "$@"; do
  label=${spec%%=*}
  echo "$label:${wall[$label]} — median $(median "${wall[$label]}"); CPU s per step median $(median "${cpus[$label]}")"
done
# Paired ratios: round r of LABEL_B against round r of LABEL_A (a failed run drops its round from the pair).
for spec in "$@"; do
  b=${spec%%=*}
  [[ $b == *_B ]] || continue
  a=${b%_B}_A
  [[ -n ${wall[$a]:-} ]] || continue
  ratios() {  # $1 = "wall" (B ÷ A) or "cpu" (A ÷ B: less CPU per step is faster)
    local -a x y
    if [[ $1 == wall ]]; then read -ra x <<<"${wall[$a]}"; read -ra y <<<"${wall[$b]}"
    else read -ra y <<<"${cpus[$a]}"; read -ra x <<<"${cpus[$b]}"; fi
    for ((i = 0; i < ${#x[@]}; i++)); do
      [[ ${x[i]} =~ ^[0-9.]+$ && ${y[i]} =~ ^[0-9.]+$ ]] && awk -v p="${y[i]}" -v q="${x[i]}" \
        'BEGIN { if (q > 0) printf "%.3f ", p / q }'
    done
  }
  echo "$b ÷ $a, median of the rounds' ratios: wall $(median "$(ratios wall)"), per CPU second $(median "$(ratios cpu)")"
done
