#!/usr/bin/env bash
# Reference CNN: mwstrat vs PyTorch (python3-torch) training samples/s, and mwstrat's dense GEMMs vs OpenBLAS
# sgemm, on this machine, in one run. PyTorch and OpenBLAS are run with and without OPENBLAS_CORETYPE=SkylakeX
# (Debian's OpenBLAS may pick a generic kernel otherwise) and compared at their faster.
#   usage: benchmarks/nn/compare.sh BUILD_DIR [RESULTS_DIR]   (a Release build with MWSTRAT_BUILD_BENCHMARKS=ON;
#          the raw JSON and PyTorch figures are kept in RESULTS_DIR when given)
set -euo pipefail
build=${1:?usage: compare.sh BUILD_DIR [RESULTS_DIR]}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/benchmarks/nn/mwstrat_bench_nn
blas=$build/benchmarks/nn/mwstrat_bench_nn_openblas
if [[ $# -ge 2 ]]; then
  tmp=$2
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
echo "load before: $(uptime)"

"$bench" --benchmark_out="$tmp/mw.json" --benchmark_out_format=json >/dev/null 2>&1
if [[ -x $blas ]]; then
  OPENBLAS_CORETYPE= "$blas" --benchmark_out="$tmp/blas_default.json" --benchmark_out_format=json >/dev/null 2>&1
  OPENBLAS_CORETYPE=SkylakeX "$blas" --benchmark_out="$tmp/blas_skx.json" --benchmark_out_format=json >/dev/null 2>&1
fi
for b in 64 128; do
  for t in 1 2; do
    env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=$t /usr/bin/python3 "$here/torch_cnn.py" $b $t >"$tmp/torch_${b}_${t}_default"
    OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=$t /usr/bin/python3 "$here/torch_cnn.py" $b $t >"$tmp/torch_${b}_${t}_skx"
  done
done
echo "load after:  $(uptime)"

python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def load(name):
    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        return {}
    out = {}
    for b in json.load(open(path))["benchmarks"]:
        out[b["name"].split("/min_time")[0].split("/real_time")[0]] = b
    return out
mw = load("mw.json")
print("\nTraining, reference CNN (forward + backward + SGD), samples/s")
print(f"{'batch':>5} {'threads':>7} {'mwstrat':>9} {'torch':>9} {'torch SKX':>10} {'ratio vs faster':>16}")
for b in (64, 128):
    for t in (1, 2):
        m = mw[f"Train/batch:{b}/threads:{t}"]["samples/s"]
        td = float(open(os.path.join(tmp, f"torch_{b}_{t}_default")).read())
        ts = float(open(os.path.join(tmp, f"torch_{b}_{t}_skx")).read())
        print(f"{b:>5} {t:>7} {m:>9.0f} {td:>9.0f} {ts:>10.0f} {m / max(td, ts):>15.2f}x")
bd, bs = load("blas_default.json"), load("blas_skx.json")
names = {0: "forward X K^T", 1: "dK = dZ^T X", 2: "dX = dZ K"}
print("\nDense(21632 -> 128) GEMMs, GFLOP/s")
print(f"{'product':>14} {'batch':>5} {'threads':>7} {'mwstrat':>8} {'OpenBLAS':>9} {'OB SKX':>7} {'% of faster':>12}")
for kind in (0, 1, 2):
    for b in (64, 128):
        for t in (1, 2):
            key = f"Dense/batch:{b}/threads:{t}/kind:{kind}"
            m = mw[key]["GFLOP/s"]
            d = bd.get(key, {}).get("GFLOP/s", float("nan"))
            s = bs.get(key, {}).get("GFLOP/s", float("nan"))
            print(f"{names[kind]:>14} {b:>5} {t:>7} {m:>8.1f} {d:>9.1f} {s:>7.1f} {100 * m / max(d, s):>11.0f}%")
PY
