#!/usr/bin/env bash
# A private single-node VictoriaMetrics (Debian's victoria-metrics 1.79) on loopback, the
# second telemetry store the integration tests run against (docs/metrics.md, "Stores").
#
#   deploy/dev/victoria-metrics.sh install          apt-get install it when missing (as root)
#   deploy/dev/victoria-metrics.sh up               install if missing, start, wait until ready
#   deploy/dev/victoria-metrics.sh down             stop it (only the process in our pid file)
#   deploy/dev/victoria-metrics.sh status           running or not, and where
#   deploy/dev/victoria-metrics.sh import FILE...   OpenMetrics files -> import API -> queryable
#
# Default flags but three: loopback only, a data dir of its own, and a retention long enough
# for the tests' fixed 2026 timestamps (VictoriaMetrics' default is one month, and it refuses
# samples older than its retention at import). Never touches the Debian unit (port 8428) and
# never kills by process name: the pid file is trusted only while /proc/<pid>/cmdline still
# holds our listen address (deploy/dev/pidfile.sh).
# Environment: VM_PORT (18428), VM_DIR (<repo>/var/victoria-metrics), VM_RETENTION (400d, as
# prometheus.sh keeps), VM_SCRAPE_CONFIG (a Prometheus-style scrape config: VictoriaMetrics
# scrapes it itself, as the real-exporter tests need; default: no scraping).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NAME=victoria-metrics.sh
SERVER=victoria-metrics
LISTEN_FLAG=-httpListenAddr
# shellcheck source=deploy/dev/pidfile.sh
. "$ROOT/deploy/dev/pidfile.sh"
PORT=${VM_PORT:-18428}
BASE=${VM_DIR:-$ROOT/var/victoria-metrics}
DATA=$BASE/data
RUN=$BASE/run
PIDFILE=$RUN/victoria-metrics-$PORT.pid
LOG=$RUN/victoria-metrics-$PORT.log
LISTEN=127.0.0.1:$PORT
URL=http://$LISTEN

install_if_missing() {
  command -v victoria-metrics >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "victoria-metrics.sh: victoria-metrics missing; as root: apt-get install victoria-metrics" >&2
    return 1
  fi
  echo "victoria-metrics.sh: installing Debian's victoria-metrics"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -q
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends victoria-metrics
  # The package enables its own unit on :8428; we never use it, and leave it as the system has it.
}

ready() { curl -fsS -m 2 "$URL/health" >/dev/null 2>&1; }

start() {
  if our_pid >/dev/null; then wait_ready; return 0; fi
  if ready; then
    echo "victoria-metrics.sh: $LISTEN is answering but is not ours (no valid $PIDFILE)" >&2
    return 1
  fi
  mkdir -p "$DATA"
  local scrape=()
  [ -n "${VM_SCRAPE_CONFIG:-}" ] && scrape=(-promscrape.config="$VM_SCRAPE_CONFIG")
  launch victoria-metrics -httpListenAddr="$LISTEN" -storageDataPath="$DATA" \
    -retentionPeriod="${VM_RETENTION:-400d}" "${scrape[@]}"
}

import() {
  [ $# -gt 0 ] || { echo "usage: $0 import FILE..." >&2; return 2; }
  if ! our_pid >/dev/null; then
    # The samples would land in a store this checkout does not own, or nowhere.
    echo "victoria-metrics.sh: no VictoriaMetrics of ours on $LISTEN; run: $0 up" >&2
    return 1
  fi
  python3 "$ROOT/deploy/dev/vm_import.py" "$URL" "$@"
}

case "${1:-status}" in
  install) install_if_missing ;;
  up) install_if_missing; start; echo "victoria-metrics: up on $URL (data $DATA)" ;;
  down) stop; echo "victoria-metrics: down" ;;
  status)
    if pid=$(our_pid) && ready; then echo "victoria-metrics: up on $URL (pid $pid)"; else echo "victoria-metrics: down ($URL)"; exit 3; fi ;;
  import) shift; import "$@" ;;
  *) echo "usage: $0 install|up|down|status|import FILE..." >&2; exit 2 ;;
esac
