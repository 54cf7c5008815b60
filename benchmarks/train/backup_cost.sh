#!/usr/bin/env bash
# The training-throughput cost of BackupAndRestore with save_freq = 100 steps (issue 8's goal: < 3%).
# Runs train_throughput with and without backups, interleaved, REPEATS times each, and prints the medians.
#   benchmarks/train/backup_cost.sh BUILD_DIR [WORKERS] [REPEATS]
set -euo pipefail
build="${1:?usage: backup_cost.sh BUILD_DIR [WORKERS] [REPEATS]}"
workers="${2:-1}"
repeats="${3:-3}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$build/benchmarks/train/train_throughput"
launch="$build/tools/mwstrat-launch"
backup="$(mktemp -d)/backup"
common=(--data-dir "$root/.cache/mnist" --warmup 10 --steps 300)

samples() { grep -o '"samples_per_s":[0-9.]*' | cut -d: -f2; }
plain=() with=()
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$repeats"); do
  plain+=("$("$launch" -n "$workers" -- "$bin" "${common[@]}" | samples)")
  with+=("$("$launch" -n "$workers" -- "$bin" "${common[@]}" --backup-dir "$backup" --save-freq 100 | samples)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p="$(median "${plain[@]}")"; w="$(median "${with[@]}")"
echo "| workers | samples/s without backup | with save_freq=100 | cost |"
echo "|---|---|---|---|"
awk -v n="$workers" -v p="$p" -v w="$w" 'BEGIN { printf "| %d | %.0f | %.0f | %.1f%% |\n", n, p, w, 100 * (p - w) / p }'
echo "runs without: ${plain[*]}; with: ${with[*]}"
