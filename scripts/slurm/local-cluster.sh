#!/usr/bin/env bash
# Start a one-node Slurm on this machine (Debian's slurm-wlm and munge), for tests and demos:
#   scripts/slurm/local-cluster.sh start STATE_DIR    prints the SLURM_CONF to export
#   scripts/slurm/local-cluster.sh stop STATE_DIR
# Runs as root; writes only under STATE_DIR (and starts munged if it is not running).
set -euo pipefail
action=${1:?start|stop}
state=$(mkdir -p "${2:?STATE_DIR}" && cd "$2" && pwd)
conf="$state/slurm.conf"
host=$(hostname -s)

if [ "$action" = stop ]; then
  for pidfile in "$state"/slurmd.pid "$state"/slurmctld.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  exit 0
fi

if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  [ -s /etc/munge/munge.key ] || (dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null)
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
fi

mkdir -p "$state/spool" "$state/ctld"
cpus=$(nproc)
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
cat >"$conf" <<CONF
ClusterName=gpubench-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$conf"
/usr/sbin/slurmctld -f "$conf"
/usr/sbin/slurmd -f "$conf"
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "$conf"
    exit 0
  fi
  sleep 0.5
done
echo "slurm did not come up; see $state/slurmctld.log and $state/slurmd.log" >&2
exit 1
