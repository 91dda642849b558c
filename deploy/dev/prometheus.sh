#!/usr/bin/env bash
# A private Prometheus 2.42 on loopback for tests, CI and the demo (docs: shared prometheus notes §1-2).
#
#   deploy/dev/prometheus.sh up                 install if missing, start, wait until ready
#   deploy/dev/prometheus.sh down               stop it (only the process in our pid file)
#   deploy/dev/prometheus.sh status             running or not, and where
#   deploy/dev/prometheus.sh backfill FILE...   OpenMetrics files -> TSDB blocks -> queryable
#
# Never touches the Debian prometheus.service (port 9090) and never kills by process name:
# the pid file is trusted only while /proc/<pid>/cmdline still holds our listen address.
# Environment: PROM_PORT (9091), PROM_DIR (<repo>/var/prometheus), PROM_QUERY_TIMEOUT (30s), PROM_CONFIG (the config
# file, default deploy/dev/prometheus.yml: no scrape targets; the real-exporter tests pass
# their own, which scrapes node_exporter and a dcgm-exporter-shaped endpoint on loopback).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=prometheus.sh
SERVER=Prometheus
# shellcheck source=deploy/dev/pidfile.sh
. "$ROOT/deploy/dev/pidfile.sh"
PORT=${PROM_PORT:-9091}
BASE=${PROM_DIR:-$ROOT/var/prometheus}
DATA=$BASE/data
RUN=$BASE/run
PIDFILE=$RUN/prometheus-$PORT.pid
LOG=$RUN/prometheus-$PORT.log
CONFIG=${PROM_CONFIG:-$ROOT/deploy/dev/prometheus.yml}
LISTEN=127.0.0.1:$PORT
URL=http://$LISTEN

install_if_missing() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "prometheus.sh: prometheus/promtool missing; as root: apt-get install prometheus" >&2
    return 1
  fi
  echo "prometheus.sh: installing Debian's prometheus (with promtool)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -q
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends prometheus
  # The package starts its own unit on :9090; we never use it, and leave it as the system has it.
}

ready() { curl -fsS -m 2 "$URL/-/ready" >/dev/null 2>&1; }

start() {
  if our_pid >/dev/null; then wait_ready; return 0; fi
  if curl -fsS -m 2 "$URL/-/ready" >/dev/null 2>&1; then
    stop_other_checkouts || {
      echo "prometheus.sh: $LISTEN is answering but is not ours (no valid $PIDFILE)" >&2
      return 1
    }
  fi
  mkdir -p "$DATA"
  launch prometheus --config.file="$CONFIG" \
    --web.listen-address="$LISTEN" \
    --storage.tsdb.path="$DATA" --storage.tsdb.retention.time=400d \
    --web.enable-remote-write-receiver --web.enable-lifecycle --web.enable-admin-api \
    --query.max-samples=5000000 --query.timeout="${PROM_QUERY_TIMEOUT:-30s}"
}

stop_other_checkouts() {
  # The dev Prometheus of another Beacon checkout (a clean clone in CI, a worktree) holds the
  # port: stop it, so that `up` does not depend on what ran before. Only a process listening
  # here whose command line is that of this script's Prometheus (our config's file name, a
  # var/prometheus data dir) is stopped; anything else on the port is left alone.
  local pid cmd
  pid=$(ss -Hltnp "sport = :$PORT" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
  case "$cmd" in
    prometheus\ *--config.file=*/deploy/dev/*--web.listen-address=$LISTEN\ *--storage.tsdb.path=*/var/prometheus/data\ *) ;;
    *) return 1 ;;
  esac
  echo "prometheus.sh: stopping the dev Prometheus of another checkout on $LISTEN (pid $pid)" >&2
  kill -TERM "$pid"
  for _ in $(seq 1 120); do
    alive "$pid" || return 0
    sleep 0.25
  done
  echo "prometheus.sh: pid $pid did not stop within 30 s" >&2
  return 1
}

backfill() {
  [ $# -gt 0 ] || { echo "usage: $0 backfill FILE..." >&2; return 2; }
  install_if_missing
  local out
  out=$(mktemp -d "$BASE/blocks.XXXXXX" 2>/dev/null || { mkdir -p "$BASE"; mktemp -d "$BASE/blocks.XXXXXX"; })
  trap 'rm -rf "$out"' RETURN
  for file in "$@"; do
    # 6 h blocks: promtool re-reads the input once per block window (doc §2).
    promtool tsdb create-blocks-from openmetrics -q --max-block-duration=6h "$file" "$out" >/dev/null
  done
  # A running server only picks up new blocks at its next reload (up to a minute) and only
  # then compacts them; a restart loads them at once and /-/ready means they are queryable.
  local was_running=0
  our_pid >/dev/null && was_running=1
  if [ $was_running = 0 ] && curl -fsS "$URL/-/ready" >/dev/null 2>&1; then
    # Something else serves this port (a Prometheus started from another checkout): the
    # blocks would land in a data dir nobody reads. Say so instead of passing silently.
    echo "prometheus.sh: $LISTEN is served by a Prometheus this checkout did not start" \
         "(its data dir is not $DATA); stop it or set PROM_PORT" >&2
    return 1
  fi
  [ $was_running = 1 ] && stop
  mkdir -p "$DATA"
  local n=0
  for block in "$out"/*/; do
    [ -f "$block/meta.json" ] || continue
    mv "$block" "$DATA/"
    n=$((n + 1))
  done
  echo "prometheus.sh: moved $n block(s) into $DATA"
  [ $was_running = 1 ] && start
  return 0
}

case "${1:-status}" in
  up) install_if_missing; start; echo "prometheus: up on $URL (data $DATA)" ;;
  down) stop; echo "prometheus: down" ;;
  status)
    if pid=$(our_pid) && ready; then echo "prometheus: up on $URL (pid $pid)"; else echo "prometheus: down ($URL)"; exit 3; fi ;;
  backfill) shift; backfill "$@" ;;
  *) echo "usage: $0 up|down|status|backfill FILE..." >&2; exit 2 ;;
esac
