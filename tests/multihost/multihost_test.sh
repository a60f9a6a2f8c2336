#!/usr/bin/env bash
# `agoq train` across hosts (network namespaces, scripts/hosts.sh), 2 hosts at 1 Gbit/s, one rank each, TCP only.
#
#   multihost_test.sh AGOQ DATA WORK CASE...
#
#   identical   the losses of a 2-host run equal a 2-rank shared-memory run's bit for bit, for the fp32 path
#               (--grad-store fp32 --allreduce mpi) and the q8 path (the defaults)
#   link        host 1's link goes down mid-run: every rank gone within LIMIT s, a message naming host 1, a non-zero
#               exit, and the last checkpoint resumes
#   kill        rank 1 gets SIGKILL mid-run: the same
#   slow        host 1's link drops to 10 Mbit/s mid-run: the run finishes, with the losses of an unslowed run
#
# Exit 77 (ctest's SKIP_RETURN_CODE) with a line saying why when network namespaces cannot be made here. Whatever
# happens, the hosts and every process in them are removed on exit.
set -euo pipefail
(($# >= 4)) || { echo "usage: multihost_test.sh AGOQ DATA WORK CASE..." >&2; exit 2; }
agoq=$1 data=$2 work=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
hosts_sh="$here/../../scripts/hosts.sh"
export AGOQ_NET_PREFIX=agoqci AGOQ_NET_SUBNET=10.214.0
LIMIT=30  # seconds from a fault until every rank is gone (docs/parallel.md, "Faults across hosts")
h0=agoqci-h0 h1=agoqci-h1

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: multihost tests need root (network namespaces)"; exit 77; fi
if ! ip netns add agoqci-probe 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (ip netns add failed)"
  exit 77
fi
ip netns del agoqci-probe

job=""
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null || true
  local ns pid
  for ns in $h0 $h1; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  "$hosts_sh" down >/dev/null || true
}
trap cleanup EXIT
root_links() { ip -o link show | awk -F': ' '{print $2}' | sort | tr '\n' ' '; }
root_before=$(root_links)
"$hosts_sh" up 2 --rate 1gbit
[ "$(root_links)" = "$root_before" ] || { echo "FAIL: hosts.sh up added links to the root namespace" >&2; exit 1; }

fail() { echo "FAIL: $*" >&2; exit 1; }
ranks_alive() { echo $(ip netns pids $h0) $(ip netns pids $h1); }
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
tokens_per_s() {  # RUN FIRST LAST: the median tokens/s of steps FIRST..LAST
  sed -n "$2,$3p" "$1/metrics.jsonl" | grep -o '"tokens_per_s":[0-9.]*' | cut -d: -f2 | sort -n |
    awk '{v[NR] = $1} END {print int(v[int((NR + 1) / 2)])}'
}
steps_done() { [ -f "$1/metrics.jsonl" ] && wc -l <"$1/metrics.jsonl" || echo 0; }

shape=(--layers 2 --heads 4 --kv-heads 2 --seq 16 --batch 4 --eval-every 0 --eval-batches 1 --quiet)
model=(--dim 32 --ffn 48 "${shape[@]}")
env=(-x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 -x AGOQ_COMM_TIMEOUT=20)
shm_train() { mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "${env[@]}" "$agoq" train "$@"; }
net_train() { "$hosts_sh" mpirun -np 2 "${env[@]}" "$agoq" train "$@"; }

case_identical() {
  local path args
  for path in fp32 q8; do
    args=("${model[@]}" --data "$data" --steps 8 --overwrite)
    [ $path = fp32 ] && args+=(--grad-store fp32 --allreduce mpi)
    shm_train "${args[@]}" --out "$work/shm-$path"
    net_train "${args[@]}" --out "$work/net-$path"
    [ "$(losses "$work/shm-$path" | wc -l)" -eq 8 ] || fail "$path path: the shared-memory run did not log 8 losses"
    diff <(losses "$work/shm-$path") <(losses "$work/net-$path") ||
      fail "$path path: the 2-host losses differ from the shared-memory run's"
    echo "identical: $path path, 8 losses equal bit for bit (2 hosts over TCP vs 2 ranks over shared memory)"
  done
}

# Starts a long run in the background (checkpoint every 5 steps) and waits until it has passed step $1.
start_long_run() {
  net_train "${model[@]}" --data "$data" --steps 100000 --ckpt-every 5 --overwrite --out "$work/run" \
    >"$work/run.log" 2>&1 &
  job=$!
  local t=0
  until (($(steps_done "$work/run") >= $1)); do
    kill -0 "$job" 2>/dev/null || { cat "$work/run.log"; fail "the run ended before step $1"; }
    ((t++ < 300)) || fail "the run did not reach step $1 in 30 s"
    sleep 0.1
  done
}

# After a fault at time $1: mpirun must exit non-zero and every process on the hosts must be gone within LIMIT s;
# the log must match $2. Then the last checkpoint must resume.
expect_job_ends() {
  local t0=$1 re=$2 rc=0 took
  while kill -0 "$job" 2>/dev/null || [ -n "$(ranks_alive)" ]; do
    if (($(date +%s) - t0 >= LIMIT)); then
      cat "$work/run.log"
      ps -o pid,stat,etime,args -p "$(ranks_alive | tr ' ' ,)" 2>/dev/null || true
      fail "processes still alive on the hosts ${LIMIT} s after the fault"
    fi
    sleep 0.2
  done
  wait "$job" || rc=$?
  job=""
  took=$(($(date +%s) - t0))
  cat "$work/run.log"
  ((rc != 0)) || fail "the job exited with status 0 after the fault"
  grep -Eq "$re" "$work/run.log" || fail "the log does not name the failed host or rank (/$re/)"
  echo "fault: every rank gone ${took} s after it, mpirun's status $rc"
  "$hosts_sh" link $h1 up
  "$hosts_sh" rate $h1 1gbit
  local at
  at=$(readlink "$work/run/ckpt")
  net_train "${model[@]}" --data "$data" --steps 100000 --stop-after 3 --resume "$work/run/ckpt" --out "$work/run" ||
    fail "resuming from the last checkpoint ($at) failed"
  echo "fault: resumed from $at and trained 3 more steps"
}

case_link() {
  start_long_run 12
  "$hosts_sh" link $h1 down
  expect_job_ends "$(date +%s)" "Remote daemon: .* on node agoqci-h1|rank 1/2 on agoqci-h1"
  # Rank 0 cannot write a checkpoint without its peer; it says which one is the last good one.
  grep -Eq "a peer is lost none can be written: the last good checkpoint is step [0-9]+ " "$work/run.log" ||
    fail "rank 0 did not name the last good checkpoint"
}

case_kill() {
  start_long_run 12
  local pid
  for pid in $(ip netns pids $h1); do [ "$(cat /proc/"$pid"/comm)" = agoq ] && kill -9 "$pid"; done
  expect_job_ends "$(date +%s)" "process rank 1 with PID [0-9]+ on node agoqci-h1 exited on signal 9"
}

case_slow() {
  local steps=30 args=(--dim 128 --ffn 256 "${shape[@]}" --data "$data" --steps 30 --overwrite)
  net_train "${args[@]}" --out "$work/fast" >/dev/null
  net_train "${args[@]}" --out "$work/slow" >"$work/slow.log" 2>&1 &
  job=$!
  local t=0
  until (($(steps_done "$work/slow") >= 5)); do
    kill -0 "$job" 2>/dev/null || fail "the run ended before step 5 (too fast to be slowed)"
    ((t++ < 300)) || fail "the run did not reach step 5 in 30 s"
    sleep 0.1
  done
  "$hosts_sh" rate $h1 10mbit
  local t0 rc=0
  t0=$(date +%s)
  wait "$job" || rc=$?
  job=""
  ((rc == 0)) || { cat "$work/slow.log"; fail "the slowed run failed (status $rc)"; }
  (($(steps_done "$work/slow") == steps)) || fail "the slowed run logged $(steps_done "$work/slow") steps, not $steps"
  diff <(losses "$work/fast") <(losses "$work/slow") || fail "the slowed run's losses differ from the unslowed run's"
  local before after
  before=$(tokens_per_s "$work/slow" 2 4) after=$(tokens_per_s "$work/slow" 10 "$steps")
  ((after < before)) || fail "the run did not slow down (tokens/s $before before, $after after): was the link shaped?"
  echo "slow: host 1 at 10 Mbit/s from step 5 on: $before -> $after tokens/s; the run finished" \
    "$(($(date +%s) - t0)) s later and its $steps losses equal the unslowed run's"
  "$hosts_sh" rate $h1 1gbit
}

rm -rf "$work" && mkdir -p "$work"
for c in "$@"; do
  case $c in
    identical | link | kill | slow) "case_$c" ;;
    *) fail "unknown case '$c'" ;;
  esac
done
cleanup
trap - EXIT
# down leaves nothing: no namespace of the set, and the root namespace's links as they were before up
! ip netns list | grep -q '^agoqci-' || fail "hosts.sh down left namespaces: $(ip netns list | grep '^agoqci-')"
[ "$(root_links)" = "$root_before" ] || fail "the root namespace's links changed: $(root_links)"
echo "PASS: $*"
