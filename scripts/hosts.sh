#!/usr/bin/env bash
# A test cluster on this one machine (docs/parallel.md, "Across hosts"): N "hosts", each a network
# namespace, joined by veth pairs to a bridge that lives in a namespace of its own (the "switch"), addresses from one
# private /24 that exists only inside those namespaces, and each host's link shaped with tc tbf in both directions.
# Nothing is added to the root namespace, so no packet of the test network can leave the machine.
#
#   scripts/hosts.sh up N [--rate 10gbit]   make hosts PREFIX-h0 .. PREFIX-h{N-1} (replaces an existing set)
#   scripts/hosts.sh down                   remove every namespace of the set (and with them every link)
#   scripts/hosts.sh rate HOST RATE         reshape one host's link, e.g. while a job runs (10mbit, 1gbit, ...)
#   scripts/hosts.sh link HOST up|down      take one host's link up or down (at the switch side)
#   scripts/hosts.sh linked HOST            exit 0 if the host's link is up at the switch side, 1 if it is down
#   scripts/hosts.sh exec HOST CMD...       run CMD on HOST (its network namespace, its own host name)
#   scripts/hosts.sh list                   the hosts of the set, one a line
#   scripts/hosts.sh mpirun ARGS...         mpirun on host 0 across the set, TCP only: the command docs/parallel.md
#                                           spells out, with ARGS (-np N, -x VAR, the program) appended
#
# Environment: AGOQ_NET_PREFIX (default "agoq"; names the set, so CI and a benchmark can each have their own) and
# AGOQ_NET_SUBNET (default 10.213.0, the /24's first three octets, 10.x.y; host i is .(i+1)). Root is required.
set -Eeuo pipefail  # -E: the ERR trap of up also fires inside the functions it calls

prefix=${AGOQ_NET_PREFIX:-agoq}
subnet=${AGOQ_NET_SUBNET:-10.213.0}
switch="$prefix-sw"
hostfile="${TMPDIR:-/tmp}/$prefix-hostfile"  # one line per host, written by up, removed by down
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "hosts.sh: $*" >&2; exit 1; }
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "AGOQ_NET_PREFIX must be 1-8 lower-case letters/digits, got '$prefix'"
[[ $subnet =~ ^10\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "AGOQ_NET_SUBNET must be a 10.x.y (a private /24), got '$subnet'"

need_root() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces, veth pairs and tc need CAP_NET_ADMIN)"
  command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (Debian package iproute2)"
}

hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-h[0-9]+$" | sort -V || true; }

# tbf on one interface: burst of 2 ms at the rate (at least 64 KiB, so one GSO segment fits), queue of 50 ms.
shape() {  # NS DEV RATE
  local bits burst
  bits=$(rate_bits "$3")
  burst=$((bits / 8 / 500)); ((burst < 65536)) && burst=65536
  tc -n "$1" qdisc replace dev "$2" root tbf rate "$3" burst "$burst" latency 50ms
}

rate_bits() {  # 10gbit -> 10000000000
  local r=${1,,} n unit
  [[ $r =~ ^([1-9][0-9]*)(bit|kbit|mbit|gbit)$ ]] || die "rate must look like 100mbit, 1gbit or 10gbit, got '$1'"
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;; gbit) echo $((n * 1000000000)) ;; esac
}

host_index() {  # PREFIX-hI -> I, or die
  [[ $1 =~ ^$prefix-h([0-9]+)$ ]] && ip netns list | awk '{print $1}' | grep -qx "$1" || die "no host '$1' (see: hosts.sh list)"
  echo "${BASH_REMATCH[1]}"
}

down() {
  local ns
  for ns in $(hosts) "$switch"; do
    ip netns list | awk '{print $1}' | grep -qx "$ns" && ip netns del "$ns"
  done
  return 0
}

up() {
  local n=$1 rate=$2 i h
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 64)) || die "up: the number of hosts must be in 1..64, got '$n'"
  rate_bits "$rate" >/dev/null
  down
  trap 'echo "hosts.sh: up failed; removing what it made" >&2; down' ERR
  ip netns add "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  for ((i = 0; i < n; i++)); do
    h="$prefix-h$i"
    ip netns add "$h"
    # Both ends are created directly in their namespaces: nothing appears in the root namespace, even briefly.
    ip link add eth0 netns "$h" type veth peer name "p$i" netns "$switch"
    ip -n "$switch" link set "p$i" master br0 up
    ip -n "$h" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    ip netns exec "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1  # IPv4 only: no link-local chatter
    shape "$h" eth0 "$rate"              # host -> switch
    shape "$switch" "p$i" "$rate"        # switch -> host
  done
  trap - ERR
  hosts | sed 's/$/ slots=1/' >"$hostfile"
  echo "hosts.sh: $n hosts ($prefix-h0 .. $prefix-h$((n - 1))) on $subnet.0/24 inside namespaces, links shaped to $rate"
}

cmd=${1:-}
[ -n "$cmd" ] || die "usage: hosts.sh up N [--rate R] | down | rate HOST R | link HOST up|down | linked HOST | exec HOST CMD... | list | mpirun ARGS..."
shift
case $cmd in
  up)
    need_root
    n=${1:-}; shift || true
    rate=10gbit
    while (($#)); do
      case $1 in --rate) rate=${2:?--rate needs a value}; shift 2 ;; *) die "up: unknown argument '$1'" ;; esac
    done
    up "$n" "$rate" ;;
  down)
    need_root
    down
    rm -f "$hostfile"
    echo "hosts.sh: removed the hosts of '$prefix'" ;;
  rate)
    need_root
    i=$(host_index "${1:?rate: which host?}")
    rate=${2:?rate: which rate?}
    shape "$1" eth0 "$rate" && shape "$switch" "p$i" "$rate" ;;
  link)
    need_root
    i=$(host_index "${1:?link: which host?}")
    [[ ${2:-} == up || ${2:-} == down ]] || die "link: say up or down"
    ip -n "$switch" link set "p$i" "$2"
    if [ "$2" = up ]; then
      # Back to a usable link before returning: carrier on both ends, and no neighbour entry left FAILED by the
      # outage on any host (a new connection would otherwise wait on it).
      for _ in $(seq 50); do
        [ "$(ip netns exec "$1" cat /sys/class/net/eth0/operstate)" = up ] && break
        sleep 0.1
      done
      for h in $(hosts); do ip -n "$h" neigh flush all; done
    fi ;;
  linked)
    need_root
    i=$(host_index "${1:?linked: which host?}")
    ip -n "$switch" -o link show "p$i" | grep -q '[<,]UP[,>]' ;;
  exec)
    need_root
    h=${1:?exec: which host?}; shift
    host_index "$h" >/dev/null
    # Its own UTS namespace too, so that the host name (and with it Open MPI's per-host session directory and
    # its reports) is the host's.
    exec ip netns exec "$h" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$h" "$@" ;;
  list)
    hosts ;;
  mpirun)
    need_root
    [ -f "$hostfile" ] && host_index "$prefix-h0" >/dev/null || die "mpirun: no hosts; run hosts.sh up N first"
    # The TCP transport only (no shared memory between "hosts"), on the test network only, for both MPI's messages
    # and Open MPI's own daemons; TCP keepalive on the daemons' connections so that mpirun notices a host whose
    # link is gone within ~5 s instead of the kernel's ~15 min. The hosts share this machine's cores, which Open MPI
    # cannot see (one slot each): ranks waiting in MPI yield the core instead of spinning on it.
    exec "$0" exec "$prefix-h0" mpirun --allow-run-as-root --hostfile "$hostfile" --map-by node --bind-to none \
      --mca mpi_yield_when_idle 1 \
      --mca plm_rsh_agent "$here/netns-agent.sh" \
      --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
      --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 "$@" ;;
  *) die "unknown command '$cmd'" ;;
esac
