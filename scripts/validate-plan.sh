#!/usr/bin/env bash
# Validates `agoq plan`'s step-time model against real `agoq train` runs on this machine (4 ranks on one host, and
# 2 hosts over links shaped to 100 Mbit/s and 1 Gbit/s) and writes docs/evidence/plan-validation.md; see
# scripts/evidence/plan.py for what it runs. Run as root (the hosts are network namespaces) on a quiet machine.
#   scripts/validate-plan.sh [--steps 12] [--reps 2] [--no-hosts] [--report-only]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/agoq ] || { echo "validate-plan.sh: build/agoq is missing (scripts/build.sh agoq)" >&2; exit 1; }
[ -s data/austen/train.bin ] ||
  { echo "validate-plan.sh: data/austen is missing (scripts/demo.sh prepares it)" >&2; exit 1; }
exec /usr/bin/python3 scripts/evidence/plan.py "$@"
