#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install dependencies, build, fetch and prepare the default corpus
# (Jane Austen's novels), train the demo model and sample from it. A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
bash scripts/fetch-corpus.sh
[ -f data/austen/train.bin ] || build/agoq prepare --input data/janeaustenr --out data/austen
build/agoq train --data data/austen --out runs/demo --steps "${AGOQ_DEMO_STEPS:-400}" "$@"
build/agoq sample --ckpt runs/demo/ckpt --prompt "It is a truth universally acknowledged" --tokens 80
