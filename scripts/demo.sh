#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build the agoq binary, fetch and prepare the
# default corpus (Jane Austen's novels), train the demo model with AGoQ, sample from it, and end with the run's
# peak memory by category next to what the fp32 and bf16-store baselines need for the same run. A few minutes on
# 2 cores. Extra arguments go to `agoq train` (e.g. --baseline for the unquantized run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh agoq
bash scripts/fetch-corpus.sh
[ -f data/austen/train.bin ] || build/agoq prepare --input data/janeaustenr --out data/austen
mkdir -p runs
# The memory table is shown once, at the end: held back from the training's output, printed after the sample.
build/agoq train --data data/austen --out runs/demo --steps "${AGOQ_DEMO_STEPS:-400}" "$@" 2>&1 | tee runs/demo.log |
  sed '/^peak memory by category/,$d'
build/agoq sample --ckpt runs/demo/ckpt --prompt "It is a truth universally acknowledged" --tokens 80
echo
sed -n '/^peak memory by category/,$p' runs/demo.log
