#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install dependencies (with PyTorch for the parity test),
# build, fetch and prepare the corpus the training test learns, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
bash scripts/build.sh
bash scripts/fetch-corpus.sh
[ -f data/austen/train.bin ] || build/agoq prepare --input data/janeaustenr --out data/austen
# Two tests at a time, one thread each: OpenMP threads spin, so oversubscribing 2 cores is far slower.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
(cd build && ctest --output-on-failure --timeout 900 -j2)
# The second configuration: clang with ASan + UBSan over the unit suites, and the fuzz targets (docs/reliability.md).
bash scripts/sanitize.sh
