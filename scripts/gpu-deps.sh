#!/usr/bin/env bash
# Packs what the GPU-only build needs beyond CMake, ninja and nvcc -- GoogleTest (static), CLI11 and nlohmann-json
# (headers), with their CMake package files -- from this Debian machine's packages into DIR, for a GPU machine that
# has none of them (docs/cuda.md). scripts/gpu-check.sh finds them with --deps DIR. Usage: scripts/gpu-deps.sh DIR
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
echo "gpu-deps: $(du -sh "$dir" | cut -f1) in $dir"
