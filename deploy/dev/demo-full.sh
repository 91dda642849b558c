#!/usr/bin/env bash
# make demo-full: the demo month through the live paths, on one machine.
#
#   deploy/dev/demo-full.sh up       start what is not running yet (after `make demo-data`)
#   deploy/dev/demo-full.sh down     stop what `up` started (PostgreSQL and Redis stay up)
#   deploy/dev/demo-full.sh status   what runs now
#   deploy/dev/demo-full.sh help     this text
#
# What runs live:
#   Prometheus 2.42  on loopback (deploy/dev/prometheus.sh), the simulator's telemetry backfilled
#                    once with promtool; every simulated cluster's prometheus_url points at it.
#   portal           gunicorn. A running job's page whose snapshot is older than a minute asks the
#                    worker to re-read the job from Prometheus (archive_job, PrometheusSource);
#                    `manage.py detect --cluster NAME` without --openmetrics reads Prometheus too.
#   Celery worker    queues sync and analysis on Redis: those refreshes, and beat's tasks.
#   Celery beat      CELERY_BEAT_SCHEDULE: security-detect (every 10 min, every cluster, the demo's
#                    included: telemetry from Prometheus), archive-pending, chargeback-drafts,
#                    the security digest, prune-task-runs.
# What does not: beat's Slurm syncs and quota checks skip simulated clusters. The demo's Slurm is a
# folder of saved command output that never changes (load_demo imported it once), so a sync would
# change nothing, and quota writes need a real sacctmgr. Prometheus holds the month up to the
# simulated "now" (cluster.json); windows after it have no telemetry (`manage.py demo --fresh`
# simulates a month that ends at the current hour).
#
# Environment: DEMO_DIR (data/demo), PROM_PORT (9091), PROM_DIR (var/prometheus), REDIS_URL
# (redis://127.0.0.1:6379/3), WEB_PORT (8000), DEMO_RUN_DIR (var/run), PY (.venv/bin/python);
# DATABASE_URL and BEACON_DATA_DIR as for every manage.py command.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PY:-.venv/bin/python}
BIN=$(dirname "$PY")
DEMO_DIR=${DEMO_DIR:-data/demo}
RUN=${DEMO_RUN_DIR:-var/run}
WEB_PORT=${WEB_PORT:-8000}
export PROM_PORT=${PROM_PORT:-9091}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/3}
export PROMETHEUS_URL=${PROMETHEUS_URL:-http://127.0.0.1:$PROM_PORT}
PROM=./deploy/dev/prometheus.sh
MARKER=beacon_demo_backfill

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start_bg() { # name, command...
  local name=$1; shift
  if alive "$RUN/$name.pid"; then echo "  $name already running (pid $(cat "$RUN/$name.pid"))"; return; fi
  nohup "$@" </dev/null >"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  echo "  started $name (pid $!, log $RUN/$name.log)"
}

demo_now() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["now"])' "$DEMO_DIR/cluster.json"; }

# The folder's telemetry is in this Prometheus: a marker sample names the folder and its "now".
backfilled() {
  curl -fsS -m 5 --get "$PROMETHEUS_URL/api/v1/query" \
    --data-urlencode "query=$MARKER{now=\"$1\"}" --data-urlencode "time=$1" 2>/dev/null |
    grep -q '"value"'
}

backfill() {
  local now=$1 marker
  if backfilled "$now"; then echo "  telemetry already backfilled"; return; fi
  marker=$(mktemp "${TMPDIR:-/tmp}/demo-marker.XXXXXX.om")
  printf '# TYPE %s gauge\n%s{now="%s"} 1 %s\n# EOF\n' "$MARKER" "$MARKER" "$now" "$((now - 60))" >"$marker"
  shopt -s nullglob
  local files=("$DEMO_DIR"/telemetry/*.om)
  shopt -u nullglob
  echo "  backfilling ${#files[@]} telemetry file(s) with promtool"
  "$PROM" backfill "${files[@]}" "$marker"
  rm -f "$marker"
  backfilled "$now" || { echo "demo-full: the backfilled telemetry is not queryable on $PROMETHEUS_URL" >&2; return 1; }
}

point_clusters() {
  "$PY" manage.py shell -v 0 -c "
import sys
from apps.clusters.models import Cluster
n = Cluster.objects.filter(is_simulated=True).update(prometheus_url='$PROMETHEUS_URL')
print(f'  {n} simulated cluster(s) read Prometheus at $PROMETHEUS_URL')
sys.exit(0 if n else 3)" 2>/dev/null || {
    echo "demo-full: no simulated cluster in the database; run make demo-data first" >&2; return 1; }
}

up() {
  [ -s "$DEMO_DIR/cluster.json" ] || {
    echo "demo-full: $DEMO_DIR has no simulator output; run make demo-data first" >&2; exit 1; }
  mkdir -p "$RUN"
  ./deploy/dev/services.sh up
  echo "== Prometheus on $PROMETHEUS_URL"
  if ! "$PROM" status >/dev/null 2>&1; then
    "$PROM" up
    touch "$RUN/prometheus-$PROM_PORT.ours"  # `down` stops only what `up` started
  fi
  backfill "$(demo_now)"
  point_clusters
  echo "== Celery worker and beat on $REDIS_URL"
  start_bg worker "$BIN/celery" -A portal worker -Q sync,analysis -l info --concurrency 1
  start_bg beat "$BIN/celery" -A portal beat -l info --schedule "$RUN/celerybeat-schedule"
  echo "== portal (gunicorn) on http://127.0.0.1:$WEB_PORT"
  start_bg web "$BIN/gunicorn" portal.wsgi -b "127.0.0.1:$WEB_PORT" -w 2 --timeout 120
  cat <<TXT

Running (stop with: make demo-full-stop, or deploy/dev/demo-full.sh down):
  portal      http://127.0.0.1:$WEB_PORT   (logins: the data folder's demo-logins.txt)
  Prometheus  $PROMETHEUS_URL   (deploy/dev/prometheus.sh; the demo month up to its "now")
  Celery      worker + beat on $REDIS_URL (logs $RUN/worker.log, $RUN/beat.log)
Live: job pages of running jobs and security detection read Prometheus; beat skips the
demo's Slurm syncs and quota checks (its Slurm files never change). deploy/dev/demo-full.sh help
TXT
}

stop_one() { # name: TERM, wait up to 20 s, then KILL; only the pid we recorded
  local name=$1 pid
  alive "$RUN/$name.pid" || { rm -f "$RUN/$name.pid"; return 0; }
  pid=$(cat "$RUN/$name.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$RUN/$name.pid"
  echo "  stopped $name (pid $pid)"
}

down() {
  local stopped=0
  for name in web beat worker; do
    if alive "$RUN/$name.pid"; then stopped=1; fi
    stop_one "$name"
  done
  if [ -e "$RUN/prometheus-$PROM_PORT.ours" ]; then
    "$PROM" down && rm -f "$RUN/prometheus-$PROM_PORT.ours"
    stopped=1
  fi
  [ $stopped = 1 ] || echo "  nothing of demo-full was running"
}

status() {
  for name in web beat worker; do
    if alive "$RUN/$name.pid"; then echo "$name: up (pid $(cat "$RUN/$name.pid"))"; else echo "$name: down"; fi
  done
  "$PROM" status || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  help|-h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
