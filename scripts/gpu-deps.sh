#!/usr/bin/env bash
# Packs what the GPU-only build needs beyond CMake, ninja and nvcc -- GoogleTest (static), CLI11 and nlohmann-json
# (headers), with their CMake package files, and OpenBLAS (the GPU model's tests compare against the CPU's ops) -- from this Debian machine's packages into DIR, for a GPU machine that has
# none of them (docs/cuda.md). scripts/gpu-check.sh finds them with --deps DIR. Usage: scripts/gpu-deps.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/gpu-deps.sh DIR}
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
mkdir -p "$dir/include" "$dir/lib/$arch/cmake" "$dir/share/cmake"
cp -r /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann "$dir/include/"
cp /usr/lib/"$arch"/libgtest*.a /usr/lib/"$arch"/libgmock*.a "$dir/lib/$arch/"
cp -r /usr/lib/"$arch"/cmake/GTest "$dir/lib/$arch/cmake/"
for pkg in CLI11 nlohmann_json; do
  src=$(dirname "$(find /usr/share/cmake /usr/lib/"$arch"/cmake /usr/share -maxdepth 3 -name "${pkg}Config.cmake" -print -quit)")
  cp -r "$src" "$dir/share/cmake/$pkg"
done
# OpenBLAS as one shared library holding what the model calls (cblas_sgemm, every CPU's kernels) with its Fortran
# runtime linked in: it needs only libgomp and libc of the GPU machine, and is a third of the static archive.
cp /usr/include/"$arch"/openblas-openmp/*.h "$dir/include/"
echo 'void agoq_blas_anchor(void) {}' > "$dir/anchor.c"
gcc -shared -fPIC -o "$dir/lib/$arch/libopenblas.so" "$dir/anchor.c" -Wl,-u,cblas_sgemm \
  /usr/lib/"$arch"/openblas-openmp/libopenblas.a -Wl,-Bstatic -lgfortran -lquadmath -Wl,-Bdynamic -fopenmp -lm -s
rm "$dir/anchor.c"
echo "gpu-deps: $(du -sh "$dir" | cut -f1) in $dir"
