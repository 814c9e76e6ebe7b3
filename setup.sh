#!/usr/bin/env bash
# sima.cpp setup: installs every build and run dependency from Debian's archive,
# then configures and builds Release (-O3 -march=native) into build/.
# Run as root (or with sudo available) on Debian 12. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"

step() { echo "==> $*"; }
die() { echo "setup.sh: FAILED at step: $*" >&2; exit 1; }

PACKAGES=(
  g++ cmake make pkg-config          # C++20 compiler and build
  libopenblas-openmp-dev             # BLAS, OpenMP build (shares our thread pool)
  libstb-dev                         # image decoding (stb_image / stb_image_write)
  nlohmann-json3-dev                 # JSON configs and checkpoint metadata
  doctest-dev                        # unit tests
  zlib1g-dev                         # reading .gz datasets
  libdnnl-dev                        # oneDNN: bf16 / int8 GEMMs of --precision (docs/precision.md)
  dataset-fashion-mnist              # /usr/share/datasets/fashion-mnist
  python3-torch                      # PyTorch: parity tests (tests/parity) and the speed peer
  python3-pil python3-torchvision    # Pillow + torchvision: the eval-transform parity test (tests/parity/gen_pil_resize.py)
  gnuplot-nox                        # curves.png of a run (train/viz/curves.cpp); optional at run time
  libopenmpi-dev openmpi-bin         # MPI data-parallel training (mpirun -np P sima-train, train/distributed/)
  clang libclang-rt-dev libomp-dev   # libFuzzer harnesses (tests/fuzz): clang, its fuzzer/ASan/UBSan runtimes, OpenMP
)

if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
  die "installing packages: run as root (or install sudo)"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q || die "apt-get update"
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" || die "apt-get install ${missing[*]}"
else
  step "all packages already installed"
fi

step "cmake configure (Release) into build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release || die "cmake configure"
step "cmake build"
cmake --build build -j"$(nproc)" || die "cmake build"
step "done: binaries in build/bin, tests: ctest --test-dir build -j$(nproc) --output-on-failure"
