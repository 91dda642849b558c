#!/usr/bin/env bash
# deploy/dev/slurm.sh up|down|status|reset|env - a REAL single-host Slurm cluster on loopback, for
# Beacon's integration tests, the demo and CI (Debian 12, as root). RELEASE picks the Slurm:
#
#   RELEASE=22.05 (default)  Debian 12's own packages, installed on this host; the daemons run
#                            here, configured in /etc/slurm. Ports: slurmctld 6817, slurmdbd 6819,
#                            slurmrestd 6820, slurmd 17001+.
#   RELEASE=24.11            Debian 13 (trixie) in a tree of its own, /var/lib/slurm-modern/trixie,
#                            built with debootstrap when missing; every daemon runs in it under
#                            chroot(1) with its own munged (the tree's /run is a tmpfs of its own,
#                            /proc and /dev are bind mounts). Ports 26817, 26819, 26820, 27001+.
#   RELEASE=26.05            the same from Debian unstable, /var/lib/slurm-modern/unstable.
#                            Ports 16817, 16819, 16820, 16001+.
# The three can run at once. They share the host's MariaDB (a chrooted slurmdbd reaches it on
# 127.0.0.1:3306), each with a database of its own (slurm_acct_db, slurm_acct_db_2411,
# slurm_acct_db_2605: a newer slurmdbd converts an older schema in place, so never share one).
# A chroot release's paths below (/etc/slurm, /var/lib/slurm-dev, /run/slurm-dev, ...) are inside
# its tree; on the host they are under the tree, as `env` prints them. The host's Slurm commands
# are 22.05: a chroot release has wrappers (`exec chroot TREE /usr/bin/sacct "$@"`) for every
# command Beacon's cli backend runs, in `env`'s BIN_DIR (the backend's `bin_dir` option).
#
#   up      install what is missing (22.05: the Debian packages; 24.11/26.05: debootstrap, the
#           tree), then start only what is not running: munged, MariaDB (an already running
#           server is reused), slurmdbd, slurmctld, one slurmd per emulated node ($NODES nodes x
#           $GPUS fake GPUs, plus one node with two GPU models), slurmrestd on a unix socket
#           (rest_auth/local) and on 127.0.0.1:$RESTD_PORT (JWT); set up accounting (teams nlp,
#           vision, speech, led by their coordinators alice, dave and erin; users alice..grace;
#           QOS; a GPU cap and a GPU-minutes quota; PrivateData=jobs) and submit the sample
#           jobs once.
#   down    cancel the cluster's jobs (KEEP_JOBS=1: keep them), stop what `up` started, by pid
#           file, in reverse order; a chroot release also unmounts its tree's mounts. Packages,
#           trees, config and the accounting database stay.
#   status  one line per daemon; exit 0 when all are up, 3 otherwise.
#   reset   `down`, then forget the cluster's history: drop the release's accounting database
#           and the controller's saved state, so the next `up` starts as on a fresh machine. CI
#           runs it first: the accounting database lives in the machine's MariaDB and outlives
#           a checkout, so jobs an earlier (perhaps interrupted) run left there would otherwise
#           change month-wide comparisons such as sreport's.
#   env     KEY=value lines for tests and humans: the release, its tree, BIN_DIR, ports, REST
#           URL and socket, how to mint a JWT and to run a command as a user, host paths of
#           the GPU->job map, its log and the pid files.
#
# Options (environment): RELEASE=22.05|24.11|26.05 NODES=4 GPUS=8 CPUS=32 MEM_MB=256000
#   CLUSTER=devcluster (24.11: dev2411, 26.05: dev2605)
#   SAMPLE_JOBS=auto|force|no (auto: once per cluster state; no: tests submit their own)
#   CGROUP=auto|yes|no (22.05 only: cgroup v1 confinement when its controllers are mounted and
#     writable; a chroot release never uses cgroups)
#   MULTI_GPU=yes|no (the extra node $MULTI_NODE with Gres=gpu:h100:2,gpu:h200:4, alone in
#     partition "multi", so the "gpu" partition keeps its identical nodes)
#   ACCOUNT_GPUS=yes|no (no: AccountingStorageTRES lists no gres/gpu, as on sites that do not
#     account GPUs; for recordings. The GPU cap and quota need it.)
#   RESTD_PORT DBPASS=... TREE=/var/lib/slurm-modern/<suite>
#
# Idempotent: re-running `up` rewrites the config, `scontrol reconfigure`s on a change (restarts
# slurmctld and the slurmd when the node list changed), starts only what is down and adds only
# what is missing in accounting. Everything stays on loopback: SlurmctldHost=localhost,
# NodeAddr=127.0.0.1, slurmrestd on 127.0.0.1 (the daemons bind the wildcard address). The
# prolog/epilog come from deploy/slurm/. Never assume job ids: they continue from the saved
# controller state.
set -euo pipefail

CMD=${1:-status}
RELEASE=${RELEASE:-22.05}
case "$RELEASE" in
  22.05) SUITE=""; PORTS="6817 6819 6820 17000"; DEF_CLUSTER=devcluster; DBNAME=slurm_acct_db ;;
  24.11) SUITE=trixie; PORTS="26817 26819 26820 27000"; DEF_CLUSTER=dev2411; DBNAME=slurm_acct_db_2411 ;;
  26.05) SUITE=unstable; PORTS="16817 16819 16820 16000"; DEF_CLUSTER=dev2605; DBNAME=slurm_acct_db_2605 ;;
  *) echo "slurm.sh: RELEASE=$RELEASE: expected 22.05, 24.11 or 26.05" >&2; exit 2 ;;
esac
read -r CTLD_PORT DBD_PORT DEF_RESTD_PORT SLURMD_PORT0 <<< "$PORTS"
CLUSTER=${CLUSTER:-$DEF_CLUSTER}
NODES=${NODES:-4}
GPUS=${GPUS:-8}
CPUS=${CPUS:-32}
MEM_MB=${MEM_MB:-256000}
SAMPLE_JOBS=${SAMPLE_JOBS:-auto}
CGROUP=${CGROUP:-auto}
MULTI_GPU=${MULTI_GPU:-yes}
ACCOUNT_GPUS=${ACCOUNT_GPUS:-yes}
RESTD_PORT=${RESTD_PORT:-$DEF_RESTD_PORT}
DBPASS=${DBPASS:-slurmdev-db-pass}
# H: where the release's file system starts on the host ("" = the host itself, for 22.05)
if [ -n "$SUITE" ]; then H=${TREE:-/var/lib/slurm-modern/$SUITE}; else H=""; fi
STATE=/var/lib/slurm-dev
RUN=/run/slurm-dev
LOG=/var/log/slurm-dev
SOCK=$RUN/slurmrestd/slurmrestd.socket
JOBMAP=$RUN/dcgm-job-map
JOBMAP_LOG=$LOG/beacon-gpu-map.log   # the prolog's GPU history (manage.py import_gpu_map)
BIN_DIR=${H:+$H$STATE/bin}
BIN_DIR=${BIN_DIR:-/usr/bin}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEPLOY_SLURM=$(cd "$HERE/../slurm" && pwd)
PKGS="munge slurmctld slurmd slurmdbd slurmrestd slurm-client libslurm-dev slurm-wlm-jwt-plugin
      mariadb-server curl"
TREE_PKGS="munge slurmctld slurmd slurmdbd slurmrestd slurm-client slurm-wlm-jwt-plugin"
# what Beacon's cli backend (and the tests) run: a wrapper each in a chroot release's BIN_DIR
COMMANDS="sacct squeue sinfo scontrol sacctmgr sshare sreport sdiag scancel sbatch srun"
USERS="alice bob carol dave erin frank grace"
MULTI_NODE=$(printf 'gpu%02d' $((NODES + 1)))
MULTI_PART=multi

export DEBIAN_FRONTEND=noninteractive

# --- helpers ----------------------------------------------------------------------------------

say() { echo "== $*"; }
die() { echo "slurm.sh: $*" >&2; exit 1; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }

# run a command of this release: in its tree for 24.11/26.05, here for 22.05
sl() { if [ -n "$H" ]; then chroot "$H" "$@"; else "$@"; fi; }
as_user() { local u=$1; shift; sl runuser -u "$u" -- "$@"; }

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
every_node() { if [ "$MULTI_GPU" = yes ]; then echo "$(all_nodes),$MULTI_NODE"; else all_nodes; fi; }
db_root() { mariadb -uroot "$@"; }
munge_ok() { sl bash -c 'munge -n | unmunge' >/dev/null 2>&1; }

# --- up: packages and the release's tree ------------------------------------------------------

install_host_packages() { # package...
  local p missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  # DPkg::Lock::Timeout: wait for another apt/dpkg (other helpers, unattended upgrades)
  apt-get -o DPkg::Lock::Timeout=900 update -q
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
}

install_packages() {
  if [ -z "$H" ]; then
    # shellcheck disable=SC2086
    install_host_packages $PKGS
  else
    install_host_packages debootstrap mariadb-server mariadb-client curl
    build_tree
  fi
}

# The Debian mirror of the host's own apt sources (deb822 or one-line format).
mirror() {
  local m
  m=$(awk '$1 == "URIs:" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# debootstrap into a scratch directory, moved into place only when complete: an interrupted
# build never leaves a half tree that looks usable. Packages missing from an older tree (e.g.
# the JWT plugin) are added with the tree's own apt.
build_tree() {
  local p missing=()
  if [ ! -x "$H/usr/sbin/slurmctld" ]; then
    [ ! -e "$H" ] || die "$H exists but holds no Slurm: move it away, or set TREE="
    say "debootstrap $SUITE into $H (about 70 s)"
    rm -rf "$H.partial"
    install -d -m 0755 "$(dirname "$H")"
    debootstrap --variant=minbase --include="$(echo $TREE_PKGS | tr ' ' ,)" "$SUITE" \
      "$H.partial" "$(mirror)" > "$(dirname "$H")/debootstrap-$SUITE.log" 2>&1 \
      || die "debootstrap failed, see $(dirname "$H")/debootstrap-$SUITE.log"
    mv "$H.partial" "$H"
  fi
  for p in $TREE_PKGS; do
    chroot "$H" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]} in $H"
  cp /etc/resolv.conf "$H/etc/resolv.conf"
  # Valid-Until: unstable's Release file expires within days; a mirror snapshot is older
  chroot "$H" apt-get -o DPkg::Lock::Timeout=900 -o Acquire::Check-Valid-Until=false update -q
  chroot "$H" apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
}

# A chroot release's mounts: the host's /proc and /dev, and a /run of its own (munged's socket
# and the daemons' pid files never meet the host's).
mount_tree() {
  mountpoint -q "$H/proc" || mount -t proc proc "$H/proc"
  mountpoint -q "$H/dev" || mount --bind /dev "$H/dev"
  mountpoint -q "$H/run" || mount -t tmpfs -o mode=0755,size=64m "slurm-$RELEASE" "$H/run"
  # minbase has no name for localhost: slurmctld then fails with "Unable to resolve localhost"
  cp /etc/hosts "$H/etc/hosts"
  grep -qw localhost "$H/etc/hosts" || echo "127.0.0.1 localhost" >> "$H/etc/hosts"
}

prepare_dirs() {
  [ -z "$H" ] || mount_tree
  install -d -m 0755 "$H$STATE" "$H$STATE/slurmd" "$H$STATE/fakegpu"
  sl install -d -o slurm -g slurm -m 0755 "$RUN" "$LOG" "$STATE/slurmctld"
  # On a systemd host the packages enable slurm*.service; slurmd.service has no -N and would
  # clash with the per-node slurmd started here. This script manages the daemons.
  if [ -z "$H" ] && [ -d /run/systemd/system ]; then
    systemctl disable --now slurmd slurmctld slurmdbd slurmrestd >/dev/null 2>&1 || true
  fi
}

# The commands Beacon's cli backend runs, as wrappers that run the tree's own (environment
# passes through: the backend sets TZ and SLURM_TIME_FORMAT with env(1)).
write_wrappers() {
  local c
  [ -n "$H" ] || return 0
  install -d -m 0755 "$BIN_DIR"
  for c in $COMMANDS; do
    printf '#!/bin/sh\n# generated by Beacon'"'"'s deploy/dev/slurm.sh: Slurm %s'"'"'s %s, run in its tree\nexec chroot %s /usr/bin/%s "$@"\n' \
      "$RELEASE" "$c" "$H" "$c" > "$BIN_DIR/$c"
    chmod 0755 "$BIN_DIR/$c"
  done
}

# --- up: munge and MariaDB --------------------------------------------------------------------

start_munge() {
  if [ -n "$H" ]; then start_munge_in_tree; return; fi
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

# The tree's munged (its own key and socket, in the tree's /run): always ours to stop.
start_munge_in_tree() {
  [ -s "$H/etc/munge/munge.key" ] \
    || dd if=/dev/urandom of="$H/etc/munge/munge.key" bs=1024 count=1 status=none
  sl chown munge:munge /etc/munge/munge.key
  chmod 0600 "$H/etc/munge/munge.key"
  sl install -d -o munge -g munge -m 0755 /run/munge
  sl install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  munge_ok && return 0
  sl runuser -u munge -- /usr/sbin/munged
  waitfor 20 munged munge_ok
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
    [ -z "$H" ] || install -d -m 0755 "$RUN"   # the host's: MariaDB is shared by the releases
    # slurmdbd's recommended values, on the command line so no file under /etc/mysql changes
    start-stop-daemon --start --background --make-pidfile --pidfile "$RUN/mariadbd.pid" \
      --chuid mysql --exec /usr/sbin/mariadbd -- --user=mysql --bind-address=127.0.0.1 \
      --innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900
    waitfor 60 mariadb db_root -e 'select 1'
  fi
  db_root -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '${DBPASS}';
              ALTER USER 'slurm'@'localhost' IDENTIFIED BY '${DBPASS}';
              GRANT ALL ON ${DBNAME}.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  [ -n "$H" ] || return 0
  # a chrooted slurmdbd cannot see the host's socket: it comes over TCP, as 'slurm'@'127.0.0.1'
  db_root -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '${DBPASS}';
              ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '${DBPASS}';
              GRANT ALL ON ${DBNAME}.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
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
  [ -s "$H$STATE/jwt_hs256.key" ] || dd if=/dev/urandom of="$H$STATE/jwt_hs256.key" bs=32 count=1 status=none
  sl chown slurm:slurm "$STATE/jwt_hs256.key"
  chmod 0600 "$H$STATE/jwt_hs256.key"
}

# Fake GPUs: character devices 195:N (NVIDIA's major) in a private dir, never /dev. slurmd 22.05
# drops GPUs without File= and complains about plain files; open() on these gives ENXIO.
make_fake_gpus() { # node count
  local g f
  install -d -m 0755 "$H$STATE/slurmd/$1" "$H$STATE/fakegpu/$1"
  for g in $(seq 0 $(($2 - 1))); do
    f="$H$STATE/fakegpu/$1/nvidia$g"
    [ -e "$f" ] || mknod -m 0666 "$f" c 195 "$g" 2>/dev/null || touch "$f"
  done
}

node_lines() {
  local i n
  for i in $(seq 1 "$NODES"); do
    n=$(node_name "$i")
    echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((SLURMD_PORT0 + i)) CPUs=$CPUS" \
         "Boards=1 SocketsPerBoard=2 CoresPerSocket=$((CPUS / 2)) ThreadsPerCore=1" \
         "RealMemory=$MEM_MB Gres=gpu:$(node_type "$i"):$GPUS State=UNKNOWN"
  done
  [ "$MULTI_GPU" = yes ] || return 0
  echo "NodeName=$MULTI_NODE NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((SLURMD_PORT0 + NODES + 1))" \
       "CPUs=$CPUS Boards=1 SocketsPerBoard=2 CoresPerSocket=$((CPUS / 2)) ThreadsPerCore=1" \
       "RealMemory=$MEM_MB Gres=gpu:h100:2,gpu:h200:4 State=UNKNOWN"
}

partition_lines() {
  local weights="CPU=1.0,Mem=0.25G,GRES/gpu=8.0"
  # slurmctld refuses to start with a billing weight on a TRES that is not accounted
  [ "$ACCOUNT_GPUS" = yes ] || weights="CPU=1.0,Mem=0.25G"
  echo "PartitionName=gpu Nodes=$(all_nodes) Default=YES DefaultTime=01:00:00 MaxTime=2-00:00:00 TRESBillingWeights=\"$weights\" State=UP"
  echo "PartitionName=debug Nodes=$(node_name "$NODES") DefaultTime=00:10:00 MaxTime=00:30:00 PriorityTier=2 State=UP"
  [ "$MULTI_GPU" = yes ] || return 0
  echo "PartitionName=$MULTI_PART Nodes=$MULTI_NODE DefaultTime=00:10:00 MaxTime=01:00:00 TRESBillingWeights=\"$weights\" State=UP"
}

accounting_tres() {
  [ "$ACCOUNT_GPUS" = yes ] || return 0
  echo "AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:a100$([ "$MULTI_GPU" = yes ] && echo ,gres/gpu:h200)"
}

write_slurm_conf() { # proctrack taskplugin acctgather
  cat > "$H/etc/slurm/slurm.conf" <<EOF
# generated by Beacon's deploy/dev/slurm.sh: Slurm $RELEASE, $NODES emulated GPU nodes$([ "$MULTI_GPU" = yes ] && echo " and $MULTI_NODE (two GPU models)"), one slurmd each, on loopback
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/jwt_hs256.key
$([ -z "$H" ] && echo CryptoType=crypto/munge)
SlurmctldPort=$CTLD_PORT
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
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations,limits,qos,safe
$(accounting_tres)
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
$(partition_lines)
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
    if [ "$MULTI_GPU" = yes ]; then
      echo "NodeName=$MULTI_NODE Name=gpu Type=h100 File=$STATE/fakegpu/$MULTI_NODE/nvidia[0-1]"
      echo "NodeName=$MULTI_NODE Name=gpu Type=h200 File=$STATE/fakegpu/$MULTI_NODE/nvidia[2-5]"
    fi
  } > "$H/etc/slurm/gres.conf"
}

write_slurmdbd_conf() {
  # 22.05: "localhost" is MariaDB's unix socket; a tree cannot see it, so TCP
  cat > "$H/etc/slurm/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$STATE/jwt_hs256.key
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=slurm
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=$([ -n "$H" ] && echo 127.0.0.1 || echo localhost)
StoragePort=3306
StorageUser=slurm
StoragePass=${DBPASS}
StorageLoc=$DBNAME
PrivateData=jobs
EOF
  sl chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 0600 "$H/etc/slurm/slurmdbd.conf"   # holds the DB password
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
  install -m 0755 "$DEPLOY_SLURM/prolog.sh" "$H/etc/slurm/beacon-prolog.sh"
  install -m 0755 "$DEPLOY_SLURM/epilog.sh" "$H/etc/slurm/beacon-epilog.sh"
  write_fake_nvidia_smi
  printf 'JOBMAP_DIR=%s\nJOBMAP_PER_NODE=yes\nJOBMAP_LOG=%s\nNVIDIA_SMI=%s\n' "$JOBMAP" \
    "$JOBMAP_LOG" "$STATE/fakegpu/nvidia-smi" > "$H/etc/slurm/beacon-jobmap.conf"
  install -d -m 0755 "$H$JOBMAP"
}

# The emulated GPUs' nvidia-smi, for the prolog's UUIDs: answers only the query the prolog makes
# (index, uuid), with a fixed UUID per node name and index. Kept out of the PATH.
write_fake_nvidia_smi() {
  cat > "$H$STATE/fakegpu/nvidia-smi" <<EOF
#!/bin/bash
# generated by Beacon's deploy/dev/slurm.sh: $GPUS emulated GPUs per node, fixed UUIDs
node=\${SLURMD_NODENAME:-\$(hostname -s)}
for i in \$(seq 0 $((GPUS - 1))); do
  h=\$(printf '%s/%s' "\$node" "\$i" | md5sum)
  echo "\$i, GPU-\${h:0:8}-\${h:8:4}-\${h:12:4}-\${h:16:4}-\${h:20:12}"
done
EOF
  chmod 0755 "$H$STATE/fakegpu/nvidia-smi"
}

conf_sum() { { cat "$H/etc/slurm/slurm.conf" "$H/etc/slurm/gres.conf" "$H/etc/slurm/cgroup.conf" 2>/dev/null || true; } | md5sum; }
nodes_sum() { { grep -h '^NodeName=' "$H/etc/slurm/slurm.conf" 2>/dev/null || true; } | md5sum; }

write_config() { # sets CONFIG_CHANGED, NODES_CHANGED, DBD_CHANGED and USE_CG
  local before nodes_before dbd_before i
  before=$(conf_sum)
  nodes_before=$(nodes_sum)
  dbd_before=$(md5sum "$H/etc/slurm/slurmdbd.conf" 2>/dev/null || true)
  write_jwt_key
  for i in $(seq 1 "$NODES"); do make_fake_gpus "$(node_name "$i")" "$GPUS"; done
  [ "$MULTI_GPU" = yes ] && make_fake_gpus "$MULTI_NODE" 6
  if [ -n "$H" ]; then   # a tree has no cgroup mounts; "disabled" keeps Slurm off cgroups
    USE_CG=0
    write_slurm_conf proctrack/linuxproc task/none jobacct_gather/linux
    echo "CgroupPlugin=disabled" > "$H/etc/slurm/cgroup.conf"
  elif [ "$CGROUP" = yes ] || { [ "$CGROUP" = auto ] && cgroup_v1_usable; }; then
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
  write_wrappers
  CONFIG_CHANGED=0
  [ "$before" = "$(conf_sum)" ] || CONFIG_CHANGED=1
  NODES_CHANGED=0
  [ "$nodes_before" = "$(nodes_sum)" ] || NODES_CHANGED=1
  DBD_CHANGED=0
  [ "$dbd_before" = "$(md5sum "$H/etc/slurm/slurmdbd.conf")" ] || DBD_CHANGED=1
  echo "process tracking: $(grep ^ProctrackType "$H/etc/slurm/slurm.conf" | cut -d= -f2)"
}

# --- up: daemons ------------------------------------------------------------------------------

start_slurmdbd() {
  if ! alive "$H$RUN/slurmdbd.pid" slurmdbd; then
    sl /usr/sbin/slurmdbd   # forks; creates (or converts) the schema
  elif [ "$DBD_CHANGED" = 1 ]; then
    sl sacctmgr -i reconfigure >/dev/null || true   # re-reads slurmdbd.conf (PrivateData)
  fi
  # a newer slurmdbd converting a big schema takes a while before it answers
  waitfor 120 slurmdbd sl sacctmgr -n show cluster
  sl sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" \
    || sl sacctmgr -i add cluster "$CLUSTER" >/dev/null
}

start_slurmctld() {
  local f
  if alive "$H$RUN/slurmctld.pid" slurmctld && [ "$NODES_CHANGED" = 1 ]; then
    # a node added or removed: slurmctld and every slurmd must restart (running jobs stay)
    echo "the node list changed: restarting slurmctld and the slurmd"
    for f in "$H$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pidfile "$f" slurmd; done
    stop_pidfile "$H$RUN/slurmctld.pid" slurmctld
  fi
  if ! alive "$H$RUN/slurmctld.pid" slurmctld; then
    sl /usr/sbin/slurmctld
  elif [ "$CONFIG_CHANGED" = 1 ]; then
    # (a changed ProctrackType/TaskPlugin needs `down` + `up` instead)
    sl scontrol reconfigure || true
  fi
  waitfor 60 slurmctld ctld_up
}

ctld_up() { sl scontrol ping | grep -q UP; }

# up = responding (no "*") and usable; plnd/mix- = planned for a pending job
nodes_up() {
  local want=$NODES parts=gpu
  [ "$MULTI_GPU" = yes ] && { want=$((NODES + 1)); parts="gpu,$MULTI_PART"; }
  [ "$(sl sinfo -h -N -p "$parts" -o '%N %t' | grep -cE ' (idle|mix|alloc|comp|plnd)[^*]*$')" -ge "$want" ]
}

start_slurmd() {
  local n
  for n in $(for i in $(seq 1 "$NODES"); do node_name "$i"; echo; done) \
           $([ "$MULTI_GPU" = yes ] && echo "$MULTI_NODE"); do
    alive "$H$RUN/slurmd-$n.pid" slurmd || sl /usr/sbin/slurmd -N "$n"
  done
  if ! waitfor 30 "nodes up" nodes_up; then
    # a node drained by an earlier bad registration: resume it (ReturnToService=2 does the rest)
    sl scontrol update nodename="$(every_node)" state=resume 2>/dev/null || true
    waitfor 60 "nodes up" nodes_up
  fi
}

# The test users, on the host (jobs of 22.05 run as them) and in a tree with the same uids.
add_users() {
  local u
  for u in $USERS; do
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
    [ -z "$H" ] || add_tree_user "$u" /bin/bash
    sl install -d -o "$u" -g "$u" "/home/$u/logs"
  done
}

add_tree_user() { # name shell: the host's uid and gid, in the tree
  local u=$1 uid gid
  uid=$(id -u "$u")
  gid=$(id -g "$u")
  chroot "$H" getent group "$gid" >/dev/null || chroot "$H" groupadd -g "$gid" "$u"
  chroot "$H" id "$u" >/dev/null 2>&1 \
    || chroot "$H" useradd -u "$uid" -g "$gid" -d "/home/$u" -s "$2" "$u" $([ "$2" = /bin/bash ] && echo -m)
  [ "$(chroot "$H" id -u "$u")" = "$uid" ] || die "user $u has another uid in $H than on the host"
}

setup_accounting() {
  local a
  add_users
  # One sacctmgr process for every command (~6 s instead of ~15 s); "add" of an existing item
  # answers "Nothing new added", so this re-runs safely. sacctmgr lower-cases descriptions.
  sl sacctmgr -i > "$H$RUN/sacctmgr-setup.log" 2>&1 <<EOF || true
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
    [ -n "$(sl sacctmgr -n -P show assoc where account=$a cluster="$CLUSTER" format=user)" ] \
      || die "accounting setup failed, see $H$RUN/sacctmgr-setup.log"
  done
}

# slurmrestd refuses root and must not be SlurmUser, and has no daemon mode. Two processes:
# rest_auth/local works only on a unix socket; JWT (TCP) needs SLURM_JWT=daemon, which breaks local.
start_slurmrestd() {
  local token
  id slurmrest >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin -d /nonexistent slurmrest
  [ -z "$H" ] || add_tree_user slurmrest /usr/sbin/nologin
  sl install -d -o slurmrest -g slurmrest -m 0755 "$(dirname "$SOCK")"
  if ! alive "$H$RUN/slurmrestd-unix.pid" slurmrestd; then
    rm -f "$H$SOCK"
    restd "$H$RUN/slurmrestd-unix.pid" "$H$LOG/slurmrestd-unix.log" \
      /usr/sbin/slurmrestd -a rest_auth/local "unix:$SOCK"
  fi
  if ! alive "$H$RUN/slurmrestd-jwt.pid" slurmrestd; then
    restd "$H$RUN/slurmrestd-jwt.pid" "$H$LOG/slurmrestd-jwt.log" \
      /usr/bin/env SLURM_JWT=daemon /usr/sbin/slurmrestd -a rest_auth/jwt "127.0.0.1:$RESTD_PORT"
  fi
  waitfor 30 "slurmrestd unix" curl -sf --unix-socket "$H$SOCK" "http://localhost/slurm/$(rest_version)/ping"
  token=$(sl scontrol token username=alice lifespan=600 | cut -d= -f2)
  waitfor 30 "slurmrestd jwt" curl -sf -H "X-SLURM-USER-NAME: alice" -H "X-SLURM-USER-TOKEN: $token" \
    "http://127.0.0.1:$RESTD_PORT/slurm/$(rest_version)/ping"
}

restd() { # pidfile logfile command... ; as slurmrest, in the tree for a chroot release
  local pidfile=$1 logfile=$2
  shift 2
  if [ -z "$H" ]; then
    start-stop-daemon --start --background --make-pidfile --pidfile "$pidfile" \
      --chuid slurmrest --output "$logfile" --exec "$1" -- "${@:2}"
  else   # chroot(1) execs: the pid is slurmrestd's
    start-stop-daemon --start --background --make-pidfile --pidfile "$pidfile" \
      --output "$logfile" --exec /usr/sbin/chroot -- --userspec=slurmrest:slurmrest "$H" "$@"
  fi
}

# The OpenAPI plugin versions the release's slurmrestd serves (its data_parser plugins), oldest
# first; 22.05 has openapi/v0.0.3x plugins instead.
rest_versions() {
  if [ -z "$H" ]; then echo "v0.0.37 v0.0.38"; return; fi
  find "$H/usr/lib/x86_64-linux-gnu/slurm-wlm" -name 'data_parser_v*.so' -printf '%f\n' \
    | sed 's/^data_parser_\(v[0-9]*\)_\([0-9]*\)_\([0-9]*\)\.so$/\1.\2.\3/' | sort -V | tr '\n' ' ' | sed 's/ $//'
}
rest_version() { rest_versions | awk '{print $NF}'; }

# --- up: sample jobs --------------------------------------------------------------------------

sub() { # user sbatch-args... ; never fatal: a refused job is part of the demo
  local u=$1
  shift
  as_user "$u" sbatch --parsable --chdir="/home/$u" -o "/home/$u/logs/%x-%j.out" "$@" \
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
  if [ "$MULTI_GPU" = yes ]; then   # both models of the two-model node in one job
    sub grace -J mixed-models --partition="$MULTI_PART" --gres=gpu:h100:1,gpu:h200:2 --time=5 --wrap 'sleep 60' >/dev/null
  fi
  if [ "$USE_CG" = 1 ]; then   # needs ConstrainRAMSpace: OUT_OF_MEMORY 0:125
    sub frank -J tts-preprocess --partition=debug --gres=gpu:1 --mem=100M --time=2 --wrap 'head -c 300M /dev/zero | tail | wc -c' >/dev/null
  fi
  # refused at submit (QOS high: DenyOnLimit, MaxTRESPerUser=gres/gpu=16)
  as_user bob sbatch --chdir=/home/bob -o /dev/null -J too-big-high --qos=high -N3 --gres=gpu:8 --time=5 --wrap 'sleep 5' 2>&1 \
    | sed 's/^/  (expected refusal) /' || true
  sleep 3
  [ -n "$cxl_pd" ] && sl scancel "$cxl_pd" || true
  # cancel the jupyter job ~10 s after it starts (a background subshell, gone within ~2 min)
  if [ -n "$cxl_r" ]; then
    ( for _ in $(seq 1 60); do
        [ "$(sl squeue -h -j "$cxl_r" -o %T 2>/dev/null)" = RUNNING ] && { sleep 10; sl scancel "$cxl_r"; break; }
        sleep 2
      done ) </dev/null >/dev/null 2>&1 &
  fi
  date -Is > "$H$STATE/sample-jobs.done"
}

maybe_submit_samples() {
  if [ "$SAMPLE_JOBS" = force ] || { [ "$SAMPLE_JOBS" = auto ] && [ ! -e "$H$STATE/sample-jobs.done" ]; }; then
    submit_samples
    waitfor 60 "jobs in sacct --json" bash -c "$BIN_DIR/sacct -a --json -S $(date +%Y-%m-%d) -E now | grep -q '\"job_id\"'"
  fi
}

# Every release's ports lie below Linux's ephemeral range (32768-60999). 26.05's were once
# 36817-37006, inside it: an outgoing connection opened earlier (Redis, PostgreSQL, curl) may
# hold one as its local port, and a daemon then cannot bind it ("Unable to bind listen port
# (37002): Address already in use", seen in CI on a busy machine). Reserving the ports at `up`
# is too late for a connection that is already open, so the ports moved; the reservation stays
# for a site that sets them inside the range. Idempotent; kept until reboot.
reserve_ports() {
  local file=/proc/sys/net/ipv4/ip_local_reserved_ports low mine have
  [ -w "$file" ] || return 0
  low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range)
  mine="$CTLD_PORT,$DBD_PORT,$RESTD_PORT,$((SLURMD_PORT0 + 1))-$((SLURMD_PORT0 + NODES + 1))"
  [ "$CTLD_PORT" -ge "$low" ] || [ "$((SLURMD_PORT0 + NODES + 1))" -ge "$low" ] || return 0
  have=$(cat "$file")
  echo "${have:+$have,}$mine" > "$file"
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "run as root"
  local t0 t
  t0=$(ms)
  say "packages";                install_packages
  reserve_ports
  prepare_dirs
  say "munged";                  start_munge
  say "mariadb";                 start_mariadb
  say "config, fake GPUs, prolog/epilog"; write_config
  say "slurmdbd";                start_slurmdbd
  say "slurmctld";               start_slurmctld
  say "slurmd x $((NODES + $([ "$MULTI_GPU" = yes ] && echo 1 || echo 0)))"; start_slurmd
  say "accounting";              setup_accounting
  say "slurmrestd (unix socket + JWT on 127.0.0.1:$RESTD_PORT)"; start_slurmrestd
  say "sample jobs ($SAMPLE_JOBS)"; maybe_submit_samples
  t=$(awk "BEGIN{print ($(ms)-$t0)/1000}")
  echo "slurm $RELEASE dev cluster up in ${t} s"
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
  alive "$H$RUN/slurmctld.pid" slurmctld || return 0
  jobs=$(sl squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  [ -n "${jobs// /}" ] || return 0
  echo "cancelling jobs: $jobs"
  # shellcheck disable=SC2086
  sl scancel $jobs 2>/dev/null || true
  for _ in $(seq 1 60); do   # stopping slurmd would leave slurmstepd and the jobs running
    [ -z "$(sl squeue -h -t R,CG,CF -o %A 2>/dev/null)" ] && break
    sleep 0.5
  done
}

# Processes still running in the tree once its daemons are gone (a job's leftovers, a
# slurmstepd): started by this release's daemons, so ours to end, by pid, before unmounting.
tree_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$H" ] && echo "${p#/proc/}"
  done
  return 0
}

unmount_tree() {
  local pids m
  pids=$(tree_pids | tr '\n' ' ')
  if [ -n "${pids// /}" ]; then
    echo "  ending what still runs in $H: $pids"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(tree_pids)" ] && break; sleep 0.1; done
    pids=$(tree_pids | tr '\n' ' ')
    # shellcheck disable=SC2086
    [ -z "${pids// /}" ] || kill -KILL $pids 2>/dev/null || true
  fi
  for m in run dev proc; do
    if mountpoint -q "$H/$m"; then
      umount "$H/$m" || die "cannot unmount $H/$m (busy: fuser -vm $H/$m)"
    fi
  done
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "run as root"
  local f
  if [ -n "$H" ] && ! mountpoint -q "$H/run"; then
    unmount_tree   # nothing can run without the tree's /run: only the mounts may be left
    return 0
  fi
  cancel_jobs
  say "stopping the Slurm $RELEASE dev cluster"
  stop_pidfile "$H$RUN/slurmrestd-jwt.pid" slurmrestd
  stop_pidfile "$H$RUN/slurmrestd-unix.pid" slurmrestd
  rm -f "$H$SOCK"
  for f in "$H$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop_pidfile "$f" slurmd; done
  stop_pidfile "$H$RUN/slurmctld.pid" slurmctld
  stop_pidfile "$H$RUN/slurmdbd.pid" slurmdbd
  if [ -n "$H" ]; then
    stop_pidfile "$H/run/munge/munged.pid" munged   # the tree's own
    unmount_tree
    return 0
  fi
  stop_pidfile "$RUN/mariadbd.pid" mariadbd    # only when `up` started it
  if [ -e "$RUN/munged.started" ]; then
    stop_pidfile /run/munge/munged.pid munged
    rm -f "$RUN/munged.started"
  fi
  return 0
}

cmd_reset() {
  cmd_down
  say "forgetting the Slurm $RELEASE dev cluster's history (accounting database, controller state)"
  if mariadb -uroot -e 'select 1' >/dev/null 2>&1; then
    db_root -e "DROP DATABASE IF EXISTS $DBNAME"
  fi
  rm -rf "${H}${STATE:?}/slurmctld" "${H}${STATE:?}/slurmd" "$H$STATE/sample-jobs.done" "$H$JOBMAP"
  [ -e "$H$JOBMAP_LOG" ] && : > "$H$JOBMAP_LOG"
  return 0
}

# --- status and env ---------------------------------------------------------------------------

status_line() { # label pidfile comm
  if alive "$2" "$3"; then printf '  %-22s up (pid %s)\n' "$1" "$(cat "$2")"; return 0; fi
  printf '  %-22s down\n' "$1"
  return 1
}

cmd_status() {
  local ok=0 f
  echo "slurm $RELEASE dev cluster ($CLUSTER${H:+, in $H}):"
  if [ -n "$H" ] && ! mountpoint -q "$H/run"; then
    echo "  (not mounted: down)"
    return 3
  fi
  if munge_ok; then echo "  munged                 up"; else echo "  munged                 down"; ok=1; fi
  if mariadb -uroot -e 'select 1' >/dev/null 2>&1; then echo "  mariadb                up"; else echo "  mariadb                down"; ok=1; fi
  status_line slurmdbd "$H$RUN/slurmdbd.pid" slurmdbd || ok=1
  status_line slurmctld "$H$RUN/slurmctld.pid" slurmctld || ok=1
  for f in "$H$RUN"/slurmd-*.pid; do
    [ -e "$f" ] || { echo "  slurmd                 down"; ok=1; break; }
    f=${f##*/slurmd-}
    status_line "slurmd ${f%.pid}" "$H$RUN/slurmd-$f" slurmd || ok=1
  done
  status_line "slurmrestd (unix)" "$H$RUN/slurmrestd-unix.pid" slurmrestd || ok=1
  status_line "slurmrestd (jwt)" "$H$RUN/slurmrestd-jwt.pid" slurmrestd || ok=1
  if [ "$ok" = 0 ]; then
    sl sinfo -N -o '  %N %P %t %c %m %G' 2>/dev/null || true
    echo "  REST: curl --unix-socket $H$SOCK http://localhost/slurm/$(rest_version)/jobs"
    echo "        http://127.0.0.1:$RESTD_PORT (JWT: ${H:+chroot $H }scontrol token username=alice)"
    echo "  GPU->job map: $H$JOBMAP/<node>/<gpu index>; logs: $H$LOG/"
    [ -z "$H" ] || echo "  commands: $BIN_DIR/ (sacct, squeue, ...: wrappers that run the tree's)"
  fi
  return $(( ok == 0 ? 0 : 3 ))
}

# What tests and humans need, as KEY=value lines (host paths).
cmd_env() {
  cat <<EOF
RELEASE=$RELEASE
SLURM_VERSION=$(sl /usr/sbin/slurmctld -V 2>/dev/null | awk '{print $2}')
ROOT=${H:-/}
BIN_DIR=$BIN_DIR
AS_USER=${H:+chroot $H }runuser -u
CLUSTER=$CLUSTER
SLURMCTLD_PORT=$CTLD_PORT
SLURMDBD_PORT=$DBD_PORT
SLURMD_PORTS=$((SLURMD_PORT0 + 1))-$((SLURMD_PORT0 + NODES + 1))
DB_NAME=$DBNAME
REST_URL=http://127.0.0.1:$RESTD_PORT
REST_SOCKET=$H$SOCK
REST_VERSIONS=$(rest_versions)
JWT_COMMAND=$BIN_DIR/scontrol token username=slurm lifespan=600
NODES=$(all_nodes)
MULTI_NODE=$([ "$MULTI_GPU" = yes ] && echo "$MULTI_NODE")
MULTI_PARTITION=$([ "$MULTI_GPU" = yes ] && echo "$MULTI_PART")
ACCOUNT_GPUS=$(grep -q '^AccountingStorageTRES=.*gres/gpu' "$H/etc/slurm/slurm.conf" 2>/dev/null && echo yes || echo no)
STATE=$H$STATE
RUN=$H$RUN
LOG=$H$LOG
JOBMAP=$H$JOBMAP
JOBMAP_LOG=$H$JOBMAP_LOG
NVIDIA_SMI=$H$STATE/fakegpu/nvidia-smi
START=RELEASE=$RELEASE SAMPLE_JOBS=no bash deploy/dev/slurm.sh up
EOF
}

case "$CMD" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  reset) [ "$(id -u)" = 0 ] || die "run as root"; cmd_reset ;;
  env) cmd_env ;;
  *) echo "usage: [RELEASE=22.05|24.11|26.05] $0 up|down|status|reset|env" >&2; exit 2 ;;
esac
