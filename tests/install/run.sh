#!/usr/bin/env bash
# ctest install.examples: sima.cpp as a library used from outside the tree (docs/library.md).
#   tests/install/run.sh BUILD_DIR [CMAKE]
# 0. The code shown on docs/library.md is in the examples (so this test builds and runs it).
# 1. cmake --install BUILD_DIR into a temporary prefix; the layout is checked.
# 2. A small checkpoint made by the installed sima-train (a 1-block DeiT, 2 steps on 64
#    Fashion-MNIST images), and a 28x28 test picture.
# 3. examples/classify and examples/custom_attention configured and built as standalone CMake
#    projects with find_package(sima) (at -O1, without -march=native: a consumer's own flags),
#    and classify.cpp once more with g++ and pkg-config's flags.
# 4. They run: custom_attention (registers a variant, DeiT forward/backward), classify (top-3),
#    finetune (5 AdamW steps on the picture as class 7: the loss falls and class 7 becomes the
#    top-1), and the pkg-config build prints what the CMake build prints.
# 5. The installed library: the apps and the programs built against it load the OpenMP build of
#    OpenBLAS through their RUNPATH; a plain program links without MPI (sima.pc and sima::sima
#    name none), the MPI backend is a component of its own (find_package(sima COMPONENTS mpi),
#    pkg-config sima-mpi); every public header compiles cleanly under -Wall -Wextra -Wpedantic;
#    sima.pc is relocatable (the installed tree copied elsewhere still works).
set -euo pipefail
build=$(cd "$1" && pwd)
cmake=${2:-cmake}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "install/run.sh: $*" >&2; exit 1; }
prefix=$dir/prefix

# ---- 0. the code docs/library.md shows is the examples' code, line for line ------------
trimmed() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' "$@"; }
trimmed "$root"/examples/classify/*.cpp "$root"/examples/classify/CMakeLists.txt \
        "$root"/examples/custom_attention/*.cpp | sort -u > "$dir/example_lines"
awk '/^```(cpp|cmake)$/ {on = 1; next} /^```/ {on = 0} on' "$root/docs/library.md" | trimmed | grep -v '^$' > "$dir/doc_lines"
[ -s "$dir/doc_lines" ] || fail "docs/library.md has no cpp or cmake block"
if grep -vxF -f "$dir/example_lines" "$dir/doc_lines"; then fail "docs/library.md shows these lines, not in examples/"; fi

# ---- 1. install ------------------------------------------------------------------------
"$cmake" --install "$build" --prefix "$prefix" > "$dir/install.log" || { cat "$dir/install.log"; fail "cmake --install failed"; }
for f in include/sima/models/io/checkpoint.h include/sima/nn/attention/variants.h include/sima/core/ops.h \
         include/sima/train/loop/loop.h include/sima/train/config/experiment_config.h \
         lib/libsima.a lib/libsima_base.a lib/cmake/sima/simaConfig.cmake lib/cmake/sima/simaConfigVersion.cmake \
         lib/cmake/sima/simaTargets.cmake lib/pkgconfig/sima.pc \
         bin/sima-train bin/sima-eval bin/sima-heatmap bin/sima-bench bin/sima-convert; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
# The library's own flags (-O3 -march=native in Release) are not handed to its users.
if grep -l -e '-march' -e '-O3' "$prefix"/lib/cmake/sima/*.cmake "$prefix/lib/pkgconfig/sima.pc"; then
  fail "the installed package passes the library's optimisation flags to its users"
fi

# ---- 2. a checkpoint and a picture -----------------------------------------------------
cat > "$dir/tiny.json" <<'JSON'
{"name": "tiny",
 "model": {"name": "deit_tiny_patch4_28_sima", "embed_dim": 32, "depth": 1, "num_heads": 2},
 "data": {"dataset": "fashion_mnist", "batch_size": 32, "num_workers": 1, "train_subset": 64, "test_subset": 32},
 "augment": {"crop": "none", "hflip": 0.0, "crop_pct": 1.0},
 "schedule": {"type": "cosine", "warmup_epochs": 0},
 "train": {"epochs": 1, "max_steps": 2, "seed": 0}}
JSON
"$prefix/bin/sima-train" --config "$dir/tiny.json" --out "$dir/run" --quiet > "$dir/train.log" 2>&1 ||
  { cat "$dir/train.log"; fail "the installed sima-train failed"; }
model=$dir/run/model.safetensors
[ -f "$model" ] || fail "sima-train wrote no $model"
# A 28x28 24-bit BMP (bottom-up rows of B, G, R), a diagonal gradient.
python3 - "$dir/x.bmp" <<'PY'
import struct, sys
w = h = 28
pixels = b"".join(bytes([(x * 9 + y * 5) % 256] * 3) for y in range(h) for x in range(w))
head = struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
open(sys.argv[1], "wb").write(head + info + pixels)
PY

# ---- 3. build the examples against the installed package --------------------------------
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
pkg-config --exists --print-errors sima || fail "pkg-config does not find sima"
pkg-config --libs --static sima > /dev/null || fail "pkg-config --static fails"
consumer=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_FLAGS=-O1)
for ex in classify custom_attention; do
  "$cmake" -S "$root/examples/$ex" -B "$dir/$ex" "${consumer[@]}" > "$dir/$ex.configure.log" 2>&1 ||
    { cat "$dir/$ex.configure.log"; fail "examples/$ex: configure against the installed package failed"; }
done
# The three builds at once (2 + 1 + 1 translation units, about 15 s of CPU each).
"$cmake" --build "$dir/classify" -j2 > "$dir/classify.build.log" 2>&1 & p1=$!
"$cmake" --build "$dir/custom_attention" > "$dir/custom_attention.build.log" 2>&1 & p2=$!
# shellcheck disable=SC2046  # pkg-config's output is a list of words
g++ -O1 -o "$dir/classify_pc" "$root/examples/classify/classify.cpp" $(pkg-config --cflags --libs sima) \
  > "$dir/pc.build.log" 2>&1 & p3=$!
wait $p1 || { cat "$dir/classify.build.log"; fail "examples/classify: build failed"; }
wait $p2 || { cat "$dir/custom_attention.build.log"; fail "examples/custom_attention: build failed"; }
wait $p3 || { cat "$dir/pc.build.log"; fail "classify.cpp with pkg-config's flags: build failed"; }

# The consumer links the OpenMP build of OpenBLAS (not the alternatives' libopenblas) and
# compiles with its own flags plus -fopenmp, no -march.
grep -q 'openblas-openmp/libopenblas' "$dir/classify/CMakeFiles/classify.dir/link.txt" ||
  fail "examples/classify does not link the OpenMP build of OpenBLAS"
grep -q -- '-fopenmp' "$dir/classify/CMakeFiles/classify.dir/flags.make" || fail "examples/classify: no -fopenmp"
if grep -- '-march' "$dir/classify/CMakeFiles/classify.dir/flags.make"; then fail "examples/classify got -march"; fi

# ---- 4. run them ---------------------------------------------------------------------------
"$dir/custom_attention/custom_attention" | tee "$dir/ca.out" || fail "custom_attention failed"
grep -q "^gradcheck of the core: ok" "$dir/ca.out" || fail "custom_attention: gradcheck"
grep -q "^DeiT with attention 'sigmoid': logits (4, 10)" "$dir/ca.out" || fail "custom_attention: forward"

"$dir/classify/classify" "$model" "$dir/x.bmp" 3 | tee "$dir/top3.out" || fail "classify failed"
[ "$(grep -c '^ *[123]\. ' "$dir/top3.out")" = 3 ] || fail "classify: not 3 ranked lines"
fmnist='T-shirt/top|Trouser|Pullover|Dress|Coat|Sandal|Shirt|Sneaker|Bag|Ankle boot'  # the checkpoint's "classes"
[ "$(grep -cE "^ *[123]\. ($fmnist) " "$dir/top3.out")" = 3 ] || fail "classify: not the checkpoint's class names"
"$dir/classify_pc" "$model" "$dir/x.bmp" 3 > "$dir/top3_pc.out" || fail "classify (pkg-config build) failed"
cmp -s "$dir/top3.out" "$dir/top3_pc.out" || fail "the pkg-config build prints something else than the CMake build"

"$dir/classify/finetune" "$model" "$dir/x.bmp" 7 5 "$dir/tuned.safetensors" | tee "$dir/ft.out" || fail "finetune failed"
first=$(awk 'NR == 1 {print $4}' "$dir/ft.out")
last=$(awk 'END {print $4}' "$dir/ft.out")
awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a)}' || fail "finetune: the loss did not fall ($first -> $last)"
"$dir/classify/classify" "$dir/tuned.safetensors" "$dir/x.bmp" 1 | tee "$dir/top1.out" || fail "classify (tuned) failed"
grep -q '^ 1\. Sneaker ' "$dir/top1.out" || fail "finetune: class 7 (Sneaker) is not the top-1 after fine-tuning on it"
# ---- 5. RUNPATH, MPI as a component, clean headers, a relocatable sima.pc ----------------
openblas_dir=$(sed -n 's/^Libs: .*-Wl,-rpath,\([^ ]*\).*/\1/p' "$prefix/lib/pkgconfig/sima.pc")
[ -n "$openblas_dir" ] || fail "sima.pc sets no RUNPATH for the OpenMP OpenBLAS"
for exe in "$prefix/bin/sima-train" "$prefix/bin/sima-eval" "$dir/classify/classify" "$dir/classify_pc"; do
  readelf -d "$exe" | grep -E 'RUNPATH|RPATH' | grep -qF "$openblas_dir" ||
    fail "$exe has no RUNPATH to $openblas_dir: it would load the alternatives' libopenblas.so.0"
  ldd "$exe" | grep 'libopenblas' | grep -qF "$openblas_dir/" || fail "$exe does not load $openblas_dir/libopenblas"
done
# A plain program links without MPI: nothing of MPI in sima.pc, sima::sima or the two examples.
if pkg-config --libs sima | grep -qi mpi; then fail "sima.pc pulls in MPI"; fi
for exe in "$dir/classify/classify" "$dir/classify_pc" "$dir/custom_attention/custom_attention"; do
  if readelf -d "$exe" | grep NEEDED | grep -qi mpi; then fail "$exe links MPI without using it"; fi
done
if [ -f "$prefix/lib/libsima_mpi.a" ]; then  # a build with MPI: the component and sima-mpi.pc
  mkdir -p "$dir/mpi_src"
  printf '#include "train/distributed/comm_mpi.h"\n#include "train/distributed/distributed.h"\nint main(int argc, char** argv) {\n  sima::use_mpi();\n  sima::init_distributed(&argc, &argv);\n  return sima::world().size() == 1 ? 0 : 1;\n}\n' > "$dir/mpi_src/main.cpp"
  printf 'cmake_minimum_required(VERSION 3.20)\nproject(mpi_user LANGUAGES CXX)\nfind_package(sima CONFIG REQUIRED COMPONENTS mpi)\nadd_executable(mpi_user main.cpp)\ntarget_link_libraries(mpi_user PRIVATE sima::sima_mpi)\n' > "$dir/mpi_src/CMakeLists.txt"
  "$cmake" -S "$dir/mpi_src" -B "$dir/mpi_build" "${consumer[@]}" > "$dir/mpi.log" 2>&1 &&
    "$cmake" --build "$dir/mpi_build" >> "$dir/mpi.log" 2>&1 || { cat "$dir/mpi.log"; fail "find_package(sima COMPONENTS mpi): build failed"; }
  "$dir/mpi_build/mpi_user" || fail "the MPI component's program failed"
  readelf -d "$dir/mpi_build/mpi_user" | grep NEEDED | grep -qi mpi || fail "the MPI component does not link MPI"
  pkg-config --libs sima-mpi | grep -q -- '-lsima_mpi' || fail "pkg-config sima-mpi gives no -lsima_mpi"
fi
# Every installed header compiles under -Wall -Wextra -Wpedantic without a warning.
(cd "$prefix/include/sima" && find . -name '*.h' | sort | sed 's|^\./\(.*\)|#include "\1"|') > "$dir/all_headers.cpp"
# shellcheck disable=SC2046
g++ -fsyntax-only -Wall -Wextra -Wpedantic -Werror $(pkg-config --cflags sima) "$dir/all_headers.cpp" \
  > "$dir/headers.log" 2>&1 || { head -40 "$dir/headers.log"; fail "the public headers are not clean under -Wall -Wextra -Wpedantic"; }
# Relocatable: the installed tree copied elsewhere, sima.pc names the new place.
cp -a "$prefix" "$dir/moved"
moved_inc=$(PKG_CONFIG_PATH=$dir/moved/lib/pkgconfig pkg-config --cflags-only-I sima | tr -d ' \n')
[ "$(realpath -m "${moved_inc#-I}")" = "$(realpath -m "$dir/moved/include/sima")" ] ||
  fail "sima.pc is not relocatable: a copy of the tree at $dir/moved gives '$moved_inc'"
echo "install/run.sh: every step passed"
