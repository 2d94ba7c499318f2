#!/usr/bin/env bash
# A real single-node Slurm (Debian's slurm-wlm 22.05 with munge) for the sweep tests, as root:
#   scripts/slurm.sh start   installs slurm-wlm and munge if missing, writes slurm.conf for this
#                            host, starts munged, slurmctld and slurmd, waits until the node
#                            takes jobs
#   scripts/slurm.sh stop    stops the three daemons
# Facts behind each line: docs/sweep.md, "Slurm on these machines" (measured on these VMs). Accounting is off
# (no slurmdbd): `squeue` and `scontrol show job` tell job states.
set -euo pipefail
cmd="${1:?usage: slurm.sh start|stop}"
conf=/etc/slurm/slurm.conf

stop() {
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  pkill -x munged 2>/dev/null || true
}

if [ "$cmd" = stop ]; then
  stop
  echo "slurm: stopped"
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: slurm.sh start|stop" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm.sh: must run as root (slurmd runs jobs as their user)" >&2; exit 2; }
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
fi
host="$(hostname -s)"
# RealMemory a little under the total, as slurmd refuses a node that reports less than it.
mem_mib=$(( $(awk '/MemTotal/ { print $2 }' /proc/meminfo) / 1024 - 512 ))
mkdir -p /etc/slurm /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
chown munge:munge /run/munge
[ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
cat >"$conf" <<CONF
ClusterName=qg
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmUser=root
ReturnToService=2
MinJobAge=3600
NodeName=$host CPUs=$(nproc) RealMemory=$mem_mib State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
stop
sleep 1
munged --force
slurmctld
slurmd
for _ in $(seq 1 60); do
  if sinfo -h -o '%t' 2>/dev/null | grep -Eq '^(idle|mix|alloc)'; then
    echo "slurm: up on $host ($(nproc) CPUs, ${mem_mib} MiB)"
    exit 0
  fi
  sleep 1
done
echo "slurm.sh: the node did not come up in 60 s; $(sinfo 2>&1 | tail -1); see /var/log/slurm/" >&2
exit 1
