#!/usr/bin/env bash
# make demo-full: the demo month through the live paths, on one machine.
#
#   deploy/dev/demo-full.sh up       start what is not running yet (after `make demo-data`)
#   deploy/dev/demo-full.sh down     stop what `up` started (PostgreSQL and Redis stay up)
#   deploy/dev/demo-full.sh status   what runs now
#   deploy/dev/demo-full.sh help     this text
#
# What runs live (the cluster stays simulated: its Slurm and telemetry come from the simulator):
#   Two telemetry stores, as a site sharding its scraping per node group (docs/metrics.md,
#                    "Several stores per cluster"): Prometheus 2.42 on loopback
#                    (deploy/dev/prometheus.sh), the simulated cluster's own prometheus_url, and
#                    VictoriaMetrics (deploy/dev/victoria-metrics.sh), a TelemetryStore "vm" that
#                    answers for the nodes of the VM_PARTITIONS partitions. The simulator's
#                    telemetry is split by store (manage.py split_telemetry: each store gets its
#                    own nodes' samples) and loaded once: promtool blocks, VictoriaMetrics'
#                    import API.
#   portal           gunicorn. A running job's page whose snapshot is older than a minute asks the
#                    worker to re-read the job (archive_job) from the store(s) holding its nodes;
#                    `manage.py detect --cluster NAME` without --openmetrics reads both stores.
#   Celery worker    queues sync and analysis on Redis: those refreshes, and beat's tasks.
#   Celery beat      CELERY_BEAT_SCHEDULE: security-detect (every 10 min, every cluster, the demo's
#                    included: telemetry from both stores), archive-pending, chargeback-drafts,
#                    the security digest, prune-task-runs.
# What does not: beat's Slurm syncs, quota checks and guardrails skip simulated clusters. The demo's
# Slurm is a folder of saved command output that never changes (load_demo imported it once), so a
# sync would change nothing, quota writes need a real sacctmgr, and a "running" job is a saved
# moment (load_demo replayed the guardrails from the files). The stores hold the month up to the
# simulated "now" (cluster.json); windows after it have no telemetry (`manage.py demo --fresh`
# simulates a month that ends at the current hour).
#
# Environment: DEMO_DIR (data/demo), PROM_PORT (9091), PROM_DIR (var/prometheus), VM_PORT (18428),
# VM_DIR (var/victoria-metrics), VM_PARTITIONS (a100: the partitions VictoriaMetrics answers for,
# space-separated; empty: one Prometheus for every node, no second store), REDIS_URL
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
export VM_PORT=${VM_PORT:-18428}
VM_URL=http://127.0.0.1:$VM_PORT
VM_PARTITIONS=${VM_PARTITIONS-a100}
VM_STORE=vm  # the TelemetryStore's name
PROM=./deploy/dev/prometheus.sh
VM=./deploy/dev/victoria-metrics.sh
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

demo_json() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$DEMO_DIR/cluster.json" "$1"; }

# A store holds the folder's telemetry as split now: a marker sample names the folder's "now"
# and the second store's claim (a changed VM_PARTITIONS loads both stores again).
backfilled() { # url, now
  curl -fsS -m 5 --get "$1/api/v1/query" --data-urlencode "time=$2" \
    --data-urlencode "query=last_over_time($MARKER{now=\"$2\",claim=\"$VM_PARTITIONS\"}[10m])" \
    2>/dev/null | grep -q '"value"'
}

backfill() {
  local now=$1 split="$RUN/telemetry-split" todo=()
  backfilled "$PROMETHEUS_URL" "$now" || todo+=(prometheus)
  [ -z "$VM_PARTITIONS" ] || backfilled "$VM_URL" "$now" || todo+=(vm)
  if [ ${#todo[@]} = 0 ]; then echo "  telemetry already backfilled"; return; fi
  echo "  splitting the telemetry by store (manage.py split_telemetry)"
  manage split_telemetry -v0 --cluster "$(demo_json name)" "$DEMO_DIR/telemetry" \
    --out "$split" | sed 's/^/    /'
  for store in "${todo[@]}"; do
    case $store in
      prometheus) load "$PROMETHEUS_URL" "$now" "$split/default" "$PROM" backfill ;;
      vm) load "$VM_URL" "$now" "$split/$VM_STORE" "$VM" import ;;
    esac
  done
  rm -rf "$split"
}

load() { # url, now, folder, loader command...
  local url=$1 now=$2 folder=$3 marker files
  shift 3
  marker=$(mktemp "${TMPDIR:-/tmp}/demo-marker.XXXXXX.om")
  printf '# TYPE %s gauge\n%s{now="%s",claim="%s"} 1 %s\n# EOF\n' "$MARKER" "$MARKER" "$now" \
    "$VM_PARTITIONS" "$((now - 60))" >"$marker"
  shopt -s nullglob
  files=("$folder"/*.om)
  shopt -u nullglob
  echo "  loading ${#files[@]} telemetry file(s) into $url ($*)"
  "$@" "${files[@]}" "$marker"
  rm -f "$marker"
  backfilled "$url" "$now" || { echo "demo-full: the loaded telemetry is not queryable on $url" >&2; return 1; }
}

point_clusters() {
  "$PY" manage.py shell -v 0 -c "
import sys
from apps.clusters.models import Cluster
n = Cluster.objects.filter(is_simulated=True).update(prometheus_url='$PROMETHEUS_URL')
print(f'  {n} simulated cluster(s) read Prometheus at $PROMETHEUS_URL')
sys.exit(0 if n else 3)" 2>/dev/null || {
    echo "demo-full: no simulated cluster in the database; run make demo-data first" >&2; return 1; }
  local cluster
  cluster=$(demo_json name)
  if [ -n "$VM_PARTITIONS" ]; then
    # shellcheck disable=SC2086  # one argument per partition
    manage telemetry_store -v0 "$cluster" "$VM_STORE" --url "$VM_URL" \
      --kind victoriametrics --partitions $VM_PARTITIONS --hosts | sed 's/^/  /'
    echo "  cluster $cluster: partitions $VM_PARTITIONS read VictoriaMetrics at $VM_URL," \
         "every other node Prometheus"
  else
    "$PY" manage.py telemetry_store -v0 "$cluster" "$VM_STORE" --remove >/dev/null 2>&1 || true  # none
    echo "  cluster $cluster: every node reads Prometheus (VM_PARTITIONS is empty)"
  fi
}

start_store() { # label, script, port, url: start it unless it runs
  echo "== $1 on $4"
  if ! "$2" status >/dev/null 2>&1; then
    "$2" up
    touch "$RUN/$(basename "$2" .sh)-$3.ours"  # `down` stops only what `up` started
  fi
}

manage() { # manage.py, its stderr (start-up logs, system checks) shown only when it fails
  local err rc=0
  err=$(mktemp)
  "$PY" manage.py "$@" 2>"$err" || rc=$?
  [ $rc = 0 ] || cat "$err" >&2
  rm -f "$err"
  return $rc
}

up() {
  [ -s "$DEMO_DIR/cluster.json" ] || {
    echo "demo-full: $DEMO_DIR has no simulator output; run make demo-data first" >&2; exit 1; }
  mkdir -p "$RUN"
  ./deploy/dev/services.sh up
  start_store Prometheus "$PROM" "$PROM_PORT" "$PROMETHEUS_URL"
  [ -z "$VM_PARTITIONS" ] || start_store VictoriaMetrics "$VM" "$VM_PORT" "$VM_URL"
  point_clusters
  backfill "$(demo_json now)"
  echo "== Celery worker and beat on $REDIS_URL"
  start_bg worker "$BIN/celery" -A portal worker -Q sync,analysis -l info --concurrency 1
  start_bg beat "$BIN/celery" -A portal beat -l info --schedule "$RUN/celerybeat-schedule"
  echo "== portal (gunicorn) on http://127.0.0.1:$WEB_PORT"
  start_bg web "$BIN/gunicorn" portal.wsgi -b "127.0.0.1:$WEB_PORT" -w 2 --timeout 120
  cat <<TXT

Running (stop with: make demo-full-stop, or deploy/dev/demo-full.sh down):
  portal      http://127.0.0.1:$WEB_PORT   (logins: the data folder's demo-logins.txt)
  Prometheus  $PROMETHEUS_URL   (deploy/dev/prometheus.sh; the demo month up to its "now")
$([ -z "$VM_PARTITIONS" ] || echo "  VictoriaMetrics $VM_URL   (deploy/dev/victoria-metrics.sh; the nodes of: $VM_PARTITIONS)")
  Celery      worker + beat on $REDIS_URL (logs $RUN/worker.log, $RUN/beat.log)
Live: job pages of running jobs, the archive and security detection read each node from its
store; beat skips the simulated cluster's Slurm syncs, quota checks and guardrails (its Slurm
files never change). deploy/dev/demo-full.sh help
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
  if [ -e "$RUN/victoria-metrics-$VM_PORT.ours" ]; then
    "$VM" down && rm -f "$RUN/victoria-metrics-$VM_PORT.ours"
    stopped=1
  fi
  [ $stopped = 1 ] || echo "  nothing of demo-full was running"
}

status() {
  for name in web beat worker; do
    if alive "$RUN/$name.pid"; then echo "$name: up (pid $(cat "$RUN/$name.pid"))"; else echo "$name: down"; fi
  done
  "$PROM" status || true
  "$VM" status || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  help|-h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
