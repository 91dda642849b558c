#!/usr/bin/env bash
# deploy/dev/slurm.sh up|down|status - a REAL single-host Slurm 22.05 cluster on loopback, for
# Beacon's integration tests, the demo and CI (Debian 12, as root).
#
#   up      install the Debian packages if missing, then start (only what is not running):
#           munged, MariaDB (an already running server is reused), slurmdbd, slurmctld, one slurmd
#           per emulated node ($NODES nodes x $GPUS fake GPUs), slurmrestd on a unix socket
#           (rest_auth/local) and on 127.0.0.1:$RESTD_PORT (JWT); set up accounting (teams nlp,
#           vision, speech, led by their coordinators alice, dave and erin; users alice..grace;
#           QOS; a GPU cap and a GPU-minutes quota; PrivateData=jobs) and submit the sample
#           jobs once.
#   down    cancel the cluster's jobs (KEEP_JOBS=1: keep them), stop what `up` started, by pid
#           file, in reverse order. Packages, config and the accounting database stay.
#   status  one line per daemon; exit 0 when all are up, 3 otherwise.
#   reset   `down`, then forget the cluster's history: drop the accounting database and the
#           controller's saved state, so the next `up` starts as on a fresh machine. CI runs it
#           first: the accounting database lives in the machine's MariaDB and outlives a
#           checkout, so jobs an earlier (perhaps interrupted) run left there would otherwise
#           change month-wide comparisons such as sreport's.
#
# Options (environment): NODES=4 GPUS=8 CPUS=32 MEM_MB=256000 CLUSTER=devcluster
#   SAMPLE_JOBS=auto|force|no (auto: once per cluster state; no: tests submit their own)
#   CGROUP=auto|yes|no (cgroup v1 confinement when its controllers are mounted and writable)
#   RESTD_PORT=6820 DBPASS=...
#
# Idempotent: re-running `up` rewrites the config, `scontrol reconfigure`s on a change, starts
# only what is down and adds only what is missing in accounting. Everything stays on loopback:
# SlurmctldHost=localhost, NodeAddr=127.0.0.1, slurmrestd on 127.0.0.1 (the daemons bind the
# wildcard address; 22.05 has no bind option). The prolog/epilog come from deploy/slurm/.
# Never assume job ids: they continue from the saved controller state.
set -euo pipefail

CMD=${1:-status}
CLUSTER=${CLUSTER:-devcluster}
NODES=${NODES:-4}
GPUS=${GPUS:-8}
CPUS=${CPUS:-32}
MEM_MB=${MEM_MB:-256000}
SAMPLE_JOBS=${SAMPLE_JOBS:-auto}
CGROUP=${CGROUP:-auto}
RESTD_PORT=${RESTD_PORT:-6820}
DBPASS=${DBPASS:-slurmdev-db-pass}
STATE=/var/lib/slurm-dev
RUN=/run/slurm-dev
LOG=/var/log/slurm-dev
SOCK=$RUN/slurmrestd/slurmrestd.socket
JOBMAP=$RUN/dcgm-job-map
JOBMAP_LOG=$LOG/beacon-gpu-map.log   # the prolog's GPU history (manage.py import_gpu_map)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEPLOY_SLURM=$(cd "$HERE/../slurm" && pwd)
PKGS="munge slurmctld slurmd slurmdbd slurmrestd slurm-client libslurm-dev slurm-wlm-jwt-plugin
      mariadb-server curl"
USERS="alice bob carol dave erin frank grace"

export DEBIAN_FRONTEND=noninteractive

# --- helpers ----------------------------------------------------------------------------------

say() { echo "== $*"; }
die() { echo "slurm.sh: $*" >&2; exit 1; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

# the process in pid file $1 is alive (not a zombie: PID 1 may reap slowly) and named $2
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && [ "$(awk '{print $3}' "/proc/$pid/stat")" != Z ]
}

running() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

waitfor() { # timeout_s description command...
  local end=$(( $(date +%s) + $1 )) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || { echo "timeout waiting for $what" >&2; return 1; }
    sleep 0.25
  done
}

node_name() { printf 'gpu%02d' "$1"; }
node_type() { if [ "$1" -le $(( (NODES + 1) / 2 )) ]; then echo h100; else echo a100; fi; }
all_nodes() { echo "gpu[01-$(printf '%02d' "$NODES")]"; }
db_root() { mariadb -uroot "$@"; }

# --- up: packages -----------------------------------------------------------------------------

install_packages() {
  local p missing=()
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  # DPkg::Lock::Timeout: wait for another apt/dpkg (other helpers, unattended upgrades)
  apt-get -o DPkg::Lock::Timeout=900 update -q
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
}

prepare_dirs() {
  install -d -m 0755 "$STATE" "$STATE/slurmd" "$STATE/fakegpu"
  install -d -o slurm -g slurm -m 0755 "$RUN" "$LOG" "$STATE/slurmctld"
  # On a systemd host the packages enable slurm*.service; slurmd.service has no -N and would
  # clash with the per-node slurmd started here. This script manages the daemons.
  if [ -d /run/systemd/system ]; then
    systemctl disable --now slurmd slurmctld slurmdbd slurmrestd >/dev/null 2>&1 || true
  fi
}

# --- up: munge and MariaDB --------------------------------------------------------------------

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then   # munge's postinst normally creates it
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
      || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0600 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  (munge -n | unmunge) >/dev/null 2>&1 && return 0
  runuser -u munge -- /usr/sbin/munged       # forks; pid file /run/munge/munged.pid
  touch "$RUN/munged.started"                # tells `down` that munged is ours to stop
  waitfor 20 munged bash -c 'munge -n | unmunge'
}

start_mariadb() {
  if alive "$RUN/mariadbd.pid" mariadbd; then
    waitfor 60 mariadb db_root -e 'select 1'
  elif db_root -e 'select 1' >/dev/null 2>&1; then
    rm -f "$RUN/mariadbd.pid"
    echo "reusing the MariaDB server already running (down leaves it alone)"
  elif timeout 2 bash -c '</dev/tcp/127.0.0.1/3306' 2>/dev/null; then
    die "something listens on 127.0.0.1:3306 but 'mariadb -uroot' cannot log in through the" \
        "unix socket: give root socket access or stop that server"
  else
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    install -d -o mysql -g root -m 0755 /run/mysqld
    # slurmdbd's recommended values, on the command line so no file under /etc/mysql changes
    start-stop-daemon --start --background --make-pidfile --pidfile "$RUN/mariadbd.pid" \
      --chuid mysql --exec /usr/sbin/mariadbd -- --user=mysql --bind-address=127.0.0.1 \
      --innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900
    waitfor 60 mariadb db_root -e 'select 1'
  fi
  db_root -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '${DBPASS}';
              ALTER USER 'slurm'@'localhost' IDENTIFIED BY '${DBPASS}';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

# --- up: configuration ------------------------------------------------------------------------

cgroup_v1_usable() {
  local c
  for c in memory freezer devices cpuacct; do
    [ "$(stat -f -c %T "/sys/fs/cgroup/$c" 2>/dev/null)" = cgroupfs ] || return 1
    mkdir "/sys/fs/cgroup/$c/slurm_dev_probe" 2>/dev/null || return 1   # read-only in many containers
    rmdir "/sys/fs/cgroup/$c/slurm_dev_probe"
  done
}

write_jwt_key() {
  [ -s "$STATE/jwt_hs256.key" ] || dd if=/dev/urandom of="$STATE/jwt_hs256.key" bs=32 count=1 status=none
  chown slurm:slurm "$STATE/jwt_hs256.key"
  chmod 0600 "$STATE/jwt_hs256.key"
}

# Fake GPUs: character devices 195:N (NVIDIA's major) in a private dir, never /dev. slurmd 22.05
# drops GPUs without File= and complains about plain files; open() on these gives ENXIO.
make_fake_gpus() { # node
  local g f
  install -d -m 0755 "$STATE/slurmd/$1" "$STATE/fakegpu/$1"
  for g in $(seq 0 $((GPUS - 1))); do
    f="$STATE/fakegpu/$1/nvidia$g"
    [ -e "$f" ] || mknod -m 0666 "$f" c 195 "$g" 2>/dev/null || touch "$f"
  done
}

node_lines() {
  local i n
  for i in $(seq 1 "$NODES"); do
    n=$(node_name "$i")
    echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((17000 + i)) CPUs=$CPUS" \
         "Boards=1 SocketsPerBoard=2 CoresPerSocket=$((CPUS / 2)) ThreadsPerCore=1" \
         "RealMemory=$MEM_MB Gres=gpu:$(node_type "$i"):$GPUS State=UNKNOWN"
  done
}

write_slurm_conf() { # proctrack taskplugin acctgather
  cat > /etc/slurm/slurm.conf <<EOF
# generated by Beacon's deploy/dev/slurm.sh: $NODES emulated GPU nodes, one slurmd each, on loopback
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/jwt_hs256.key
CryptoType=crypto/munge
SlurmctldPort=6817
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
ProctrackType=$1
TaskPlugin=$2
ReturnToService=2
# trust the CPUs/RealMemory below, not the host's hardware
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=2000
GresTypes=gpu
MinJobAge=300
KillWait=5
PriorityType=priority/multifactor
PriorityDecayHalfLife=7-0
PriorityCalcPeriod=1
PriorityWeightFairshare=10000
PriorityWeightAge=1000
PriorityWeightQOS=2000
PriorityWeightJobSize=100
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:a100
AccountingStoreFlags=job_comment,job_env,job_script
# users see their own jobs; account coordinators (the team leads) those of their accounts
PrivateData=jobs
JobAcctGatherType=$3
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# Beacon's deploy/slurm prolog/epilog: GPU index -> job id files for dcgm-exporter
Prolog=/etc/slurm/beacon-prolog.sh
Epilog=/etc/slurm/beacon-epilog.sh
PrologFlags=Alloc
$(node_lines)
PartitionName=gpu Nodes=$(all_nodes) Default=YES DefaultTime=01:00:00 MaxTime=2-00:00:00 TRESBillingWeights="CPU=1.0,Mem=0.25G,GRES/gpu=8.0" State=UP
PartitionName=debug Nodes=$(node_name "$NODES") DefaultTime=00:10:00 MaxTime=00:30:00 PriorityTier=2 State=UP
EOF
}

write_gres_conf() {
  local i n
  {
    echo "# generated by Beacon's deploy/dev/slurm.sh: fake GPUs (char devices 195:N)"
    echo "AutoDetect=off"
    for i in $(seq 1 "$NODES"); do
      n=$(node_name "$i")
      echo "NodeName=$n Name=gpu Type=$(node_type "$i") File=$STATE/fakegpu/$n/nvidia[0-$((GPUS - 1))]"
    done
  } > /etc/slurm/gres.conf
}

write_slurmdbd_conf() {
  cat > /etc/slurm/slurmdbd.conf <<EOF
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/jwt_hs256.key
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=${DBPASS}
StorageLoc=slurm_acct_db
PrivateData=jobs
EOF
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 0600 /etc/slurm/slurmdbd.conf   # holds the DB password
}

write_cgroup_conf() {
  cat > /etc/slurm/cgroup.conf <<'EOF'
# generated by Beacon's deploy/dev/slurm.sh: cgroup v1 (22.05's cgroup/v2 needs systemd over dbus)
CgroupPlugin=cgroup/v1
CgroupAutomount=no
# the advertised CPUs do not exist: no cpuset confinement
ConstrainCores=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainDevices=yes
EOF
}

# Beacon's own prolog/epilog (deploy/slurm/); several slurmd share this host, so the job map
# gets one sub-directory per node (a real node uses the flat default).
install_prolog() {
  install -m 0755 "$DEPLOY_SLURM/prolog.sh" /etc/slurm/beacon-prolog.sh
  install -m 0755 "$DEPLOY_SLURM/epilog.sh" /etc/slurm/beacon-epilog.sh
  write_fake_nvidia_smi
  printf 'JOBMAP_DIR=%s\nJOBMAP_PER_NODE=yes\nJOBMAP_LOG=%s\nNVIDIA_SMI=%s\n' "$JOBMAP" \
    "$JOBMAP_LOG" "$STATE/fakegpu/nvidia-smi" > /etc/slurm/beacon-jobmap.conf
  install -d -m 0755 "$JOBMAP"
}

# The emulated GPUs' nvidia-smi, for the prolog's UUIDs: answers only the query the prolog makes
# (index, uuid), with a fixed UUID per node name and index. Kept out of the PATH.
write_fake_nvidia_smi() {
  cat > "$STATE/fakegpu/nvidia-smi" <<EOF
#!/bin/bash
# generated by Beacon's deploy/dev/slurm.sh: $GPUS emulated GPUs per node, fixed UUIDs
node=\${SLURMD_NODENAME:-\$(hostname -s)}
for i in \$(seq 0 $((GPUS - 1))); do
  h=\$(printf '%s/%s' "\$node" "\$i" | md5sum)
  echo "\$i, GPU-\${h:0:8}-\${h:8:4}-\${h:12:4}-\${h:16:4}-\${h:20:12}"
done
EOF
  chmod 0755 "$STATE/fakegpu/nvidia-smi"
}

conf_sum() { { cat /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf 2>/dev/null || true; } | md5sum; }

write_config() { # sets CONFIG_CHANGED, DBD_CHANGED and USE_CG
  local before dbd_before i
  before=$(conf_sum)
  dbd_before=$(md5sum /etc/slurm/slurmdbd.conf 2>/dev/null || true)
  write_jwt_key
  for i in $(seq 1 "$NODES"); do make_fake_gpus "$(node_name "$i")"; done
  if [ "$CGROUP" = yes ] || { [ "$CGROUP" = auto ] && cgroup_v1_usable; }; then
    USE_CG=1
    write_slurm_conf proctrack/cgroup task/cgroup jobacct_gather/cgroup
    write_cgroup_conf
  else   # e.g. cgroup-v2-only hosts: no memory or device confinement, no OUT_OF_MEMORY state
    USE_CG=0
    write_slurm_conf proctrack/linuxproc task/none jobacct_gather/linux
    rm -f /etc/slurm/cgroup.conf
  fi
  write_gres_conf
  write_slurmdbd_conf
  install_prolog
  CONFIG_CHANGED=0
  [ "$before" = "$(conf_sum)" ] || CONFIG_CHANGED=1
  DBD_CHANGED=0
  [ "$dbd_before" = "$(md5sum /etc/slurm/slurmdbd.conf)" ] || DBD_CHANGED=1
  echo "process tracking: $(grep ^ProctrackType /etc/slurm/slurm.conf | cut -d= -f2)"
}

# --- up: daemons ------------------------------------------------------------------------------

start_slurmdbd() {
  if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
    /usr/sbin/slurmdbd   # forks; creates the schema once
  elif [ "$DBD_CHANGED" = 1 ]; then
    sacctmgr -i reconfigure >/dev/null || true   # re-reads slurmdbd.conf (PrivateData)
  fi
  waitfor 60 slurmdbd sacctmgr -n show cluster
  sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null
}

start_slurmctld() {
  if ! alive "$RUN/slurmctld.pid" slurmctld; then
    /usr/sbin/slurmctld
  elif [ "$CONFIG_CHANGED" = 1 ]; then
    # (a changed ProctrackType/TaskPlugin needs `down` + `up` instead)
    scontrol reconfigure || true
  fi
  waitfor 60 slurmctld bash -c 'scontrol ping | grep -q UP'
}

# up = responding (no "*") and usable; plnd/mix- = planned for a pending job
nodes_up() { [ "$(sinfo -h -N -p gpu -o '%N %t' | grep -cE ' (idle|mix|alloc|comp|plnd)[^*]*$')" -ge "$NODES" ]; }

start_slurmd() {
  local i n
  for i in $(seq 1 "$NODES"); do
    n=$(node_name "$i")
    alive "$RUN/slurmd-$n.pid" slurmd || /usr/sbin/slurmd -N "$n"
  done
  if ! waitfor 30 "nodes up" nodes_up; then
    # a node drained by an earlier bad registration: resume it (ReturnToService=2 does the rest)
    scontrol update nodename="$(all_nodes)" state=resume 2>/dev/null || true
    waitfor 60 "nodes up" nodes_up
  fi
}

setup_accounting() {
  local u a
  for u in $USERS; do
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
    install -d -o "$u" -g "$u" "/home/$u/logs"
  done
  # One sacctmgr process for every command (~6 s instead of ~15 s); "add" of an existing item
  # answers "Nothing new added", so this re-runs safely. sacctmgr lower-cases descriptions.
  sacctmgr -i > "$RUN/sacctmgr-setup.log" 2>&1 <<EOF || true
add qos high
add qos low
modify qos normal set Priority=10
modify qos high set Priority=100 MaxTRESPerUser=gres/gpu=16 Flags=DenyOnLimit Description="high priority, max 16 GPUs per user"
modify qos low set Priority=0 Description="low priority"
add account nlp Cluster=$CLUSTER Description="NLP team" Organization=research
add account vision Cluster=$CLUSTER Description="Vision team" Organization=research
add account speech Cluster=$CLUSTER Description="Speech team" Organization=research
modify account where name=nlp cluster=$CLUSTER set Fairshare=50 QOS=normal,high,low DefaultQOS=normal
modify account where name=vision cluster=$CLUSTER set Fairshare=30 QOS=normal,high,low DefaultQOS=normal GrpTRES=gres/gpu=16
modify account where name=speech cluster=$CLUSTER set Fairshare=20 QOS=normal,high,low DefaultQOS=normal GrpTRESMins=gres/gpu=20
add user alice,bob Account=nlp DefaultAccount=nlp Cluster=$CLUSTER
add user carol,dave Account=vision DefaultAccount=vision Cluster=$CLUSTER
add user erin,frank Account=speech DefaultAccount=speech Cluster=$CLUSTER
add user grace Account=nlp,vision DefaultAccount=nlp Cluster=$CLUSTER
modify user where name=alice account=nlp cluster=$CLUSTER set Fairshare=2
add coordinator account=nlp names=alice
add coordinator account=vision names=dave
add coordinator account=speech names=erin
EOF
  for a in nlp vision speech; do
    [ -n "$(sacctmgr -n -P show assoc where account=$a cluster="$CLUSTER" format=user)" ] \
      || die "accounting setup failed, see $RUN/sacctmgr-setup.log"
  done
}

# slurmrestd refuses root and must not be SlurmUser, and has no daemon mode. Two processes:
# rest_auth/local works only on a unix socket; JWT (TCP) needs SLURM_JWT=daemon, which breaks local.
start_slurmrestd() {
  local token
  id slurmrest >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin -d /nonexistent slurmrest
  install -d -o slurmrest -g slurmrest -m 0755 "$(dirname "$SOCK")"
  if ! alive "$RUN/slurmrestd-unix.pid" slurmrestd; then
    rm -f "$SOCK"
    start-stop-daemon --start --background --make-pidfile --pidfile "$RUN/slurmrestd-unix.pid" \
      --chuid slurmrest --output "$LOG/slurmrestd-unix.log" \
      --exec /usr/sbin/slurmrestd -- -a rest_auth/local "unix:$SOCK"
  fi
  if ! alive "$RUN/slurmrestd-jwt.pid" slurmrestd; then
    start-stop-daemon --start --background --make-pidfile --pidfile "$RUN/slurmrestd-jwt.pid" \
      --chuid slurmrest --output "$LOG/slurmrestd-jwt.log" \
      --exec /usr/bin/env -- SLURM_JWT=daemon /usr/sbin/slurmrestd -a rest_auth/jwt "127.0.0.1:$RESTD_PORT"
  fi
  waitfor 30 "slurmrestd unix" curl -sf --unix-socket "$SOCK" http://localhost/slurm/v0.0.38/ping
  token=$(scontrol token username=alice lifespan=600 | cut -d= -f2)
  waitfor 30 "slurmrestd jwt" curl -sf -H "X-SLURM-USER-NAME: alice" -H "X-SLURM-USER-TOKEN: $token" \
    "http://127.0.0.1:$RESTD_PORT/slurm/v0.0.38/ping"
}

# --- up: sample jobs --------------------------------------------------------------------------

sub() { # user sbatch-args... ; never fatal: a refused job is part of the demo
  local u=$1
  shift
  runuser -u "$u" -- sbatch --parsable --chdir="/home/$u" -o "/home/$u/logs/%x-%j.out" "$@" \
    || echo "  (sbatch refused for $u: ${*:1:3} ...)" >&2
}

# A job script the way an AI team writes one (launcher, parallelism, data and checkpoint
# paths), for the job labels. `torchrun` is a shell function here: no PyTorch on this host.
ai_script() {
  cat <<'EOF'
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
torchrun() { echo "torchrun $*"; sleep 40; }
export DATA_PATH=/datasets/c4/en
srun torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d \
  pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 \
  --data-path /datasets/c4/en --save /checkpoints/gpt-13b --load /checkpoints/gpt-13b
EOF
}

submit_samples() {
  local train cxl_pd cxl_r
  train=$(sub alice -J llm-pretrain-7b --gres=gpu:h100:8 --cpus-per-task=16 --mem=64G --time=30 --comment="exp=llama-7b lr=3e-4" --wrap 'srun --label hostname; sleep 600')
  sub bob   -J ddp-finetune -N2 --ntasks-per-node=1 --gres=gpu:8 --cpus-per-task=8 --time=20 --wrap 'srun --label hostname; srun sleep 240' >/dev/null
  sub erin  -J asr-finetune --gres=gpu:8 --time=1 --wrap 'sleep 600' >/dev/null                   # TIMEOUT
  # shellcheck disable=SC2016  # expanded inside the job
  sub carol -J resnet-sweep --array=0-5%2 --gres=gpu:1 --time=10 --wrap 'echo task $SLURM_ARRAY_TASK_ID gpu $CUDA_VISIBLE_DEVICES; sleep 30' >/dev/null
  sub dave  -J bad-config --gres=gpu:1 --time=5 --wrap 'echo "KeyError: lr" >&2; sleep 3; exit 3' >/dev/null  # FAILED 3:0
  # shellcheck disable=SC2016
  sub frank -J tts-oom --gres=gpu:1 --time=5 --wrap 'sleep 5; kill -9 $$' >/dev/null              # FAILED 0:9
  cxl_pd=$(sub frank -J tts-eval --gres=gpu:2 --time=5 --wrap 'sleep 300')                        # cancelled pending
  cxl_r=$(sub bob -J jupyter --partition=debug --gres=gpu:1 --time=20 --wrap 'sleep 600')        # cancelled running
  sub grace -J seg-eval --account=vision --gres=gpu:a100:2 --time=5 --wrap 'sleep 30' >/dev/null
  sub dave  -J vit-large-a --gres=gpu:8 --time=10 --wrap 'sleep 60' >/dev/null
  sub dave  -J vit-large-b --gres=gpu:8 --time=10 --wrap 'sleep 60' >/dev/null                   # AssocGrpGRES
  sub erin  -J asr-large --gres=gpu:8 --time=2 --wrap 'sleep 60' >/dev/null                      # AssocGrpGRESMinutes
  sub alice -J llm-eval --dependency=afterok:"$train" --gres=gpu:2 --time=10 --wrap 'sleep 30' >/dev/null
  sub bob   -J urgent-fix --qos=high --gres=gpu:4 --time=5 --wrap 'sleep 45' >/dev/null
  sub alice -J nightly-bench --begin=now+120 --gres=gpu:1 --time=5 --wrap 'sleep 20' >/dev/null
  sub carol -J held-job --hold --gres=gpu:1 --time=5 --wrap 'sleep 20' >/dev/null
  sub alice -J llm-pretrain-70b -N"$NODES" --ntasks-per-node=1 --gres=gpu:"$GPUS" --time=60 --wrap 'srun sleep 60' >/dev/null
  sub grace -J quick-debug --partition=debug --gres=gpu:1 --time=2 --wrap 'sleep 10' >/dev/null
  sub bob   -J het-serve --gres=gpu:1 --time=5 --wrap 'sleep 20' : --gres=gpu:2 --time=5 >/dev/null  # het job
  ai_script | sub alice -J gpt-13b-megatron --time=15 >/dev/null                                 # AI labels
  if [ "$USE_CG" = 1 ]; then   # needs ConstrainRAMSpace: OUT_OF_MEMORY 0:125
    sub frank -J tts-preprocess --partition=debug --gres=gpu:1 --mem=100M --time=2 --wrap 'head -c 300M /dev/zero | tail | wc -c' >/dev/null
  fi
  # refused at submit (QOS high: DenyOnLimit, MaxTRESPerUser=gres/gpu=16)
  runuser -u bob -- sbatch --chdir=/home/bob -o /dev/null -J too-big-high --qos=high -N3 --gres=gpu:8 --time=5 --wrap 'sleep 5' 2>&1 \
    | sed 's/^/  (expected refusal) /' || true
  sleep 3
  [ -n "$cxl_pd" ] && scancel "$cxl_pd" || true
  # cancel the jupyter job ~10 s after it starts (a background subshell, gone within ~2 min)
  if [ -n "$cxl_r" ]; then
    ( for _ in $(seq 1 60); do
        [ "$(squeue -h -j "$cxl_r" -o %T 2>/dev/null)" = RUNNING ] && { sleep 10; scancel "$cxl_r"; break; }
        sleep 2
      done ) </dev/null >/dev/null 2>&1 &
  fi
  date -Is > "$STATE/sample-jobs.done"
}

maybe_submit_samples() {
  if [ "$SAMPLE_JOBS" = force ] || { [ "$SAMPLE_JOBS" = auto ] && [ ! -e "$STATE/sample-jobs.done" ]; }; then
    submit_samples
    waitfor 60 "jobs in sacct --json" bash -c "sacct -a --json -S $(date +%Y-%m-%d) -E now | grep -q '\"job_id\"'"
  fi
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "run as root"
  local t0 t
  t0=$(ms)
  say "packages";                install_packages
  prepare_dirs
  say "munged";                  start_munge
  say "mariadb";                 start_mariadb
  say "config, fake GPUs, prolog/epilog"; write_config
  say "slurmdbd";                start_slurmdbd
  say "slurmctld";               start_slurmctld
  say "slurmd x $NODES";         start_slurmd
  say "accounting";              setup_accounting
  say "slurmrestd (unix socket + JWT on 127.0.0.1:$RESTD_PORT)"; start_slurmrestd
  say "sample jobs ($SAMPLE_JOBS)"; maybe_submit_samples
  t=$(awk "BEGIN{print ($(ms)-$t0)/1000}")
  echo "slurm dev cluster up in ${t} s"
  cmd_status || true
}

# --- down -------------------------------------------------------------------------------------

stop_pidfile() { # pidfile process-name: checks the name first (pid reuse), waits up to 30 s
  local f=$1 comm=$2 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]; then
    kill -TERM "$pid"
    for _ in $(seq 1 300); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then echo "  $comm ($pid) still running after 30 s: SIGKILL"; kill -KILL "$pid"; fi
    echo "  stopped $comm (pid $pid)"
  fi
  rm -f "$f"
}

cancel_jobs() {
  local jobs
  [ "${KEEP_JOBS:-0}" = 1 ] && return 0
  alive "$RUN/slurmctld.pid" slurmctld || return 0
  jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  echo "cancelling jobs: $jobs"
  # shellcheck disable=SC2086
  scancel $jobs 2>/dev/null || true
  for _ in $(seq 1 60); do   # stopping slurmd would leave slurmstepd and the jobs running
    [ -z "$(squeue -h -t R,CG,CF -o %A 2>/dev/null)" ] && break
    sleep 0.5
  done
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "run as root"
  local f
  cancel_jobs
  say "stopping the Slurm dev cluster"
  stop_pidfile "$RUN/slurmrestd-jwt.pid" slurmrestd
  stop_pidfile "$RUN/slurmrestd-unix.pid" slurmrestd
  rm -f "$SOCK"
  for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pidfile "$f" slurmd; done
  stop_pidfile "$RUN/slurmctld.pid" slurmctld
  stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
  stop_pidfile "$RUN/mariadbd.pid" mariadbd    # only when `up` started it
  if [ -e "$RUN/munged.started" ]; then
    stop_pidfile /run/munge/munged.pid munged
    rm -f "$RUN/munged.started"
  fi
  return 0
}

cmd_reset() {
  cmd_down
  say "forgetting the dev cluster's history (accounting database, controller state)"
  if mariadb -uroot -e 'select 1' >/dev/null 2>&1; then
    db_root -e "DROP DATABASE IF EXISTS slurm_acct_db"
  fi
  rm -rf "${STATE:?}/slurmctld" "${STATE:?}/slurmd" "$STATE/sample-jobs.done" "$JOBMAP"
  [ -e "$JOBMAP_LOG" ] && : > "$JOBMAP_LOG"
  return 0
}

# --- status -----------------------------------------------------------------------------------

status_line() { # label pidfile comm
  if alive "$2" "$3"; then printf '  %-22s up (pid %s)\n' "$1" "$(cat "$2")"; return 0; fi
  printf '  %-22s down\n' "$1"
  return 1
}

cmd_status() {
  local ok=0 f
  echo "slurm dev cluster ($CLUSTER):"
  if (munge -n | unmunge) >/dev/null 2>&1; then echo "  munged                 up"; else echo "  munged                 down"; ok=1; fi
  if mariadb -uroot -e 'select 1' >/dev/null 2>&1; then echo "  mariadb                up"; else echo "  mariadb                down"; ok=1; fi
  status_line slurmdbd "$RUN/slurmdbd.pid" slurmdbd || ok=1
  status_line slurmctld "$RUN/slurmctld.pid" slurmctld || ok=1
  for f in "$RUN"/slurmd-*.pid; do
    [ -e "$f" ] || { echo "  slurmd                 down"; ok=1; break; }
    f=${f##*/slurmd-}
    status_line "slurmd ${f%.pid}" "$RUN/slurmd-$f" slurmd || ok=1
  done
  status_line "slurmrestd (unix)" "$RUN/slurmrestd-unix.pid" slurmrestd || ok=1
  status_line "slurmrestd (jwt)" "$RUN/slurmrestd-jwt.pid" slurmrestd || ok=1
  if [ "$ok" = 0 ]; then
    sinfo -N -o '  %N %P %t %c %m %G' 2>/dev/null || true
    echo "  REST: curl --unix-socket $SOCK http://localhost/slurm/v0.0.38/jobs"
    echo "        http://127.0.0.1:$RESTD_PORT (JWT: scontrol token username=alice)"
    echo "  GPU->job map: $JOBMAP/<node>/<gpu index>; logs: $LOG/"
  fi
  return $(( ok == 0 ? 0 : 3 ))
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  reset) [ "$(id -u)" = 0 ] || die "run as root"; cmd_reset ;;
  *) echo "usage: $0 up|down|status|reset" >&2; exit 2 ;;
esac
