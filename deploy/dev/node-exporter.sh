#!/usr/bin/env bash
# Debian's node_exporter (prometheus-node-exporter 1.5) on loopback, reading a synthetic
# /sys and /proc that a test writes and updates (docs/live-telemetry.md; issue 17).
#
#   deploy/dev/node-exporter.sh up        install if missing, start, wait until it serves
#   deploy/dev/node-exporter.sh down      stop it (only the process in our pid file)
#   deploy/dev/node-exporter.sh status    running or not, and where
#
# Environment: NODE_EXPORTER_PORT (19100), NODE_EXPORTER_SYSFS and NODE_EXPORTER_PROCFS
# (the synthetic trees; default /sys and /proc), NODE_EXPORTER_DIR (pid and log files,
# default <repo>/var/node-exporter). Collectors: infiniband, netdev (from <procfs>/net/dev,
# not netlink), cpu (<procfs>/stat), meminfo; nothing else, so the host's own devices never
# leak into a test. The package's systemd unit (port 9100) is left as the system has it.
# Never kills by process name: the pid file is trusted only while /proc/<pid>/cmdline still
# holds our listen address.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=node-exporter.sh
# shellcheck source=deploy/dev/pidfile.sh
. "$ROOT/deploy/dev/pidfile.sh"
PORT=${NODE_EXPORTER_PORT:-19100}
SYSFS=${NODE_EXPORTER_SYSFS:-/sys}
PROCFS=${NODE_EXPORTER_PROCFS:-/proc}
BASE=${NODE_EXPORTER_DIR:-$ROOT/var/node-exporter}
PIDFILE=$BASE/node-exporter-$PORT.pid
LOG=$BASE/node-exporter-$PORT.log
LISTEN=127.0.0.1:$PORT
URL=http://$LISTEN

binary() { command -v prometheus-node-exporter || command -v node_exporter; }

install_if_missing() {
  binary >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "node-exporter.sh: node_exporter missing; as root: apt-get install prometheus-node-exporter" >&2
    return 1
  fi
  echo "node-exporter.sh: installing Debian's prometheus-node-exporter"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -q
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends prometheus-node-exporter
}

serving() { curl -fsS -m 2 "$URL/metrics" >/dev/null 2>&1; }

start() {
  if our_pid >/dev/null; then return 0; fi
  if serving; then
    echo "node-exporter.sh: $LISTEN is answering but is not ours (no valid $PIDFILE)" >&2
    return 1
  fi
  [ -d "$SYSFS" ] && [ -d "$PROCFS" ] || {
    echo "node-exporter.sh: $SYSFS or $PROCFS is not a directory" >&2; return 1; }
  mkdir -p "$BASE"
  setsid "$(binary)" --web.listen-address="$LISTEN" \
    --path.sysfs="$SYSFS" --path.procfs="$PROCFS" \
    --collector.disable-defaults --collector.infiniband --collector.netdev \
    --no-collector.netdev.netlink --collector.cpu --collector.meminfo \
    </dev/null >"$LOG" 2>&1 &
  local pid=$!
  echo $pid >"$PIDFILE"
  for _ in $(seq 1 120); do
    serving && return 0
    if ! alive "$pid"; then
      echo "node-exporter.sh: node_exporter exited; see $LOG" >&2; tail -5 "$LOG" >&2; return 1
    fi
    sleep 0.25
  done
  echo "node-exporter.sh: not serving after 30 s; see $LOG" >&2
  return 1
}

case "${1:-status}" in
  up) install_if_missing; start; echo "node-exporter: up on $URL (sysfs $SYSFS, procfs $PROCFS)" ;;
  down) stop; echo "node-exporter: down" ;;
  status)
    if pid=$(our_pid) && serving; then echo "node-exporter: up on $URL (pid $pid)"; else echo "node-exporter: down ($URL)"; exit 3; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
