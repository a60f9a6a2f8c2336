#!/usr/bin/env bash
# Configures and builds agoq (Release) into ./build. Usage: scripts/build.sh [target...]  (default: everything,
# tests included; `scripts/build.sh agoq` builds only the binary).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build "$@"
