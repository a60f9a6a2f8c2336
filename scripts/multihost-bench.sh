#!/usr/bin/env bash
# `agoq bench comm` across hosts (docs/comm.md, "Across hosts"): brings up N hosts with links shaped to RATE
# (scripts/hosts.sh, set "agoqb"), runs the benchmark with one rank per host over TCP, and removes the hosts again,
# also when the benchmark fails or is interrupted.
#
#   scripts/multihost-bench.sh --hosts N --rate RATE [--json] [-- BENCH-ARGS...]
#
# BENCH-ARGS go to `agoq bench comm` (default: --sizes 16,64,256; e.g. --e2e-only --e2e-dim 512 --e2e-layers 6).
# --json prints the benchmark's JSON with "rate" (as given) and "rate_bits" added to it and to each record.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "multihost-bench.sh: $*" >&2; exit 1; }

hosts="" rate="" json=0 bench=()
while (($#)); do
  case $1 in
    --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --json) json=1; shift ;;
    --) shift; bench=("$@"); break ;;
    *) die "unknown argument '$1' (usage: --hosts N --rate RATE [--json] [-- BENCH-ARGS...])" ;;
  esac
done
[[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 2)) || die "--hosts must be a number of at least 2"
[ -n "$rate" ] || die "--rate is required (e.g. 1gbit)"
[ -x build/agoq ] || die "build/agoq is missing (scripts/build.sh agoq)"
((${#bench[@]})) || bench=(--sizes 16,64,256)

export AGOQ_NET_PREFIX=agoqb
trap 'scripts/hosts.sh down >/dev/null' EXIT
scripts/hosts.sh up "$hosts" --rate "$rate" >&2

run=(scripts/hosts.sh mpirun -np "$hosts" -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 build/agoq bench comm
     "${bench[@]}")
if ((json == 0)); then
  echo "$hosts hosts, one rank each, links shaped to $rate (tc tbf), TCP only"
  "${run[@]}"
  exit
fi
out=$("${run[@]}" --json)
RATE="$rate" /usr/bin/python3 -c '
import json, os, re, sys
j = json.loads(sys.stdin.read())
rate = os.environ["RATE"]
n, unit = re.fullmatch(r"(\d+)(bit|kbit|mbit|gbit)", rate.lower()).groups()
bits = int(n) * {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}[unit]
j["rate"], j["rate_bits"] = rate, bits
for r in j["results"]:
    r["rate"], r["rate_bits"] = rate, bits
print(json.dumps(j, indent=2))
' <<<"$out"
