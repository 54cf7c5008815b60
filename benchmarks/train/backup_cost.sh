#!/usr/bin/env bash
# The training-throughput cost of BackupAndRestore with save_freq = 100 steps (issue 8's goal: < 3%).
# Runs train_throughput with and without backups, interleaved, REPEATS times each, and prints the medians of
# samples/s (wall clock: the goal) and of the CPU seconds per step of all threads of all workers (the backup's
# writer thread included), which a busy machine disturbs much less than the wall clock.
#   benchmarks/train/backup_cost.sh BUILD_DIR [WORKERS] [REPEATS]     (MWSTRAT_DATA_DIR: MNIST, default .cache/mnist)
set -euo pipefail
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"  # named in every output
build="${1:?usage: backup_cost.sh BUILD_DIR [WORKERS] [REPEATS]}"
workers="${2:-1}"
repeats="${3:-3}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$build/benchmarks/train/train_throughput"
launch="$build/tools/mwstrat-launch"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
backup="$scratch/backup"
common=(--data-dir "${MWSTRAT_DATA_DIR:-$root/.cache/mnist}" --warmup 10 --steps 300)

field() { grep -o "\"$1\":[0-9.]*" | cut -d: -f2; }
plain=() with=() plain_cpu=() with_cpu=()
echo "cpu: $cpu × $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$repeats"); do
  out="$("$launch" -n "$workers" -- "$bin" "${common[@]}")"
  plain+=("$(field samples_per_s <<<"$out")") plain_cpu+=("$(field cpu_s_per_step <<<"$out")")
  out="$("$launch" -n "$workers" -- "$bin" "${common[@]}" --backup-dir "$backup" --save-freq 100)"
  with+=("$(field samples_per_s <<<"$out")") with_cpu+=("$(field cpu_s_per_step <<<"$out")")
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
p="$(median "${plain[@]}")"; w="$(median "${with[@]}")"
pc="$(median "${plain_cpu[@]}")"; wc="$(median "${with_cpu[@]}")"
echo "| workers | samples/s without backup | with save_freq=100 | cost | CPU ms/step without | with | CPU cost |"
echo "|---|---|---|---|---|---|---|"
awk -v n="$workers" -v p="$p" -v w="$w" -v pc="$pc" -v wc="$wc" 'BEGIN {
  printf "| %d | %.0f | %.0f | %.1f%% | %.2f | %.2f | %.1f%% |\n", n, p, w, 100 * (p - w) / p, 1000 * pc, 1000 * wc,
         100 * (wc - pc) / pc }'
echo "runs without: ${plain[*]}; with: ${with[*]}"
echo "CPU s/step without: ${plain_cpu[*]}; with: ${with_cpu[*]}"
