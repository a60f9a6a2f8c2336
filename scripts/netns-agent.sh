#!/bin/sh
# Open MPI's launcher agent (plm_rsh_agent) for the hosts of scripts/hosts.sh. mpirun calls it as it would call
# ssh, "agent HOST COMMAND...", where COMMAND is a shell command line (the remote shell's job under ssh): this runs
# it on HOST, inside the host's network namespace, under the host's name.
host=$1
shift
exec "$(dirname "$0")/hosts.sh" exec "$host" sh -c "$*"
