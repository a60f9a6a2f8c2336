#!/bin/sh
# Open MPI's launcher agent (plm_rsh_agent) for the hosts of scripts/hosts.sh. mpirun calls it as it would call
# ssh, "agent HOST COMMAND...", where COMMAND is a shell command line (the remote shell's job under ssh): this runs
# it on HOST, inside the host's network namespace, under the host's name.
#
# Over a dead link ssh cannot learn that the remote command ended: it waits until mpirun, which notices the lost
# host through its own keepalive (~5 s, hosts.sh mpirun), reports that host and ends the job. Here the command's
# end is seen at once, so while HOST's link is down the agent waits like ssh would (up to 15 s, then it exits):
# otherwise mpirun may take the daemon's end for a failed launch and report no host.
here=$(dirname "$0")
host=$1
shift
"$here/hosts.sh" exec "$host" sh -c "$*"
rc=$?
i=0
while [ $i -lt 15 ] && ! "$here/hosts.sh" linked "$host" 2>/dev/null; do
  sleep 1
  i=$((i + 1))
done
exit $rc
