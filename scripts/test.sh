#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: install dependencies (with PyTorch for the parity test),
# build, fetch and prepare the corpus the training test learns, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
bash scripts/build.sh
bash scripts/fetch-corpus.sh
[ -f data/austen/train.bin ] || build/agoq prepare --input data/janeaustenr --out data/austen
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
cd build && ctest --output-on-failure --timeout 900 -j2
