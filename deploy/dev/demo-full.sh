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
#                    included: telemetry from both stores), guardrails-check (every
#                    GUARDRAILS_CHECK_EVERY s, 10 min: the simulated cluster's running GPU jobs
#                    at its simulated "now", each read live from the store holding its nodes;
#                    alerts kept marked simulated and sent to nobody, no idle-job policy step;
#                    the run is on the Platform page), archive-pending, chargeback-drafts, the
#                    security digest, prune-task-runs.
# What does not: beat's Slurm syncs and quota checks skip simulated clusters. The demo's Slurm is
# a folder of saved command output that never changes (load_demo imported it once), so a sync
# would change nothing, and quota writes need a real sacctmgr; for the same reason the guardrails
# read its "running" jobs as the saved moment they are, at the simulated "now", and never warn
# or cancel. The stores hold the month up to the simulated "now" (cluster.json); windows after
# it have no telemetry (`manage.py demo --fresh` simulates a month that ends at the current hour).
#
# Environment: DEMO_DIR (data/demo), PROM_PORT (9091), PROM_DIR (var/prometheus), VM_PORT (18428),
# VM_DIR (var/victoria-metrics), VM_PARTITIONS (a100: the partitions VictoriaMetrics answers for,
# space-separated; empty: one Prometheus for every node, no second store), REDIS_URL
# (redis://127.0.0.1:6379/3), WEB_PORT (8000), DEMO_RUN_DIR (var/run), PY (.venv/bin/python);
# DEMO_FULL_WAIT (120: the seconds `up` waits for each thing it starts to answer, then it stops
# and says which did not, with the end of its log); DATABASE_URL and BEACON_DATA_DIR as for every
# manage.py command.
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
WAIT=${DEMO_FULL_WAIT:-120}
export READY_WAIT=$WAIT  # prometheus.sh and victoria-metrics.sh wait as long (pidfile.sh)
PROM_RUN=${PROM_DIR:-$ROOT/var/prometheus}/run  # where prometheus.sh keeps its pid and log
VM_RUN=${VM_DIR:-$ROOT/var/victoria-metrics}/run
VM_PARTITIONS=${VM_PARTITIONS-a100}
VM_STORE=vm  # the TelemetryStore's name
PROM=./deploy/dev/prometheus.sh
VM=./deploy/dev/victoria-metrics.sh
MARKER=beacon_demo_backfill

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# A signal ends the script with a line saying so and where it was: killed silently, a CI run
# showed only the output before, "services: PostgreSQL and Redis are up", and no exit status.
STEP="starting"
for sig in TERM INT HUP; do
  # shellcheck disable=SC2064  # the signal's name is fixed now, the step when it comes
  trap "echo \"demo-full: stopped by SIG$sig during: \$STEP\" >&2; exit $((128 + $(kill -l $sig)))" $sig
done

fail() { # what, log: say what did not come up and the end of its log, then stop
  echo "demo-full: $1" >&2
  if [ -s "${2:-}" ]; then echo "  last lines of $2:" >&2; tail -n 15 "$2" | sed 's/^/    /' >&2; fi
  exit 1
}

wait_for() { # what, log, command...: until the command succeeds, at most WAIT seconds
  local what=$1 log=$2 deadline=$((SECONDS + WAIT))
  shift 2
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$what: no answer within $WAIT s" "$log"
    sleep 1
  done
}

holder() { # port, our pid file: who else listens on it, in words ("" when none or ours)
  local who
  who=$(ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(([^)]*))' | head -1)
  [ -n "$who" ] || return 0
  [ -s "$2" ] && grep -q "pid=$(cat "$2")," <<<"$who" && return 0  # ours, not ready yet
  echo "$who"
}

# A pid file holds "pid start": the process's start time (clock ticks since boot, field 22 of
# /proc/<pid>/stat). With pid_max at 32768, a CI run starts more processes than there are
# pids, so a pid file's pid may name a stranger by the time it is read: `down` would TERM and
# KILL whatever holds it (another test's process, another `up`), and `up` would call a dead
# worker "already running".
started_at() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }
pid_of() { awk '{print $1}' "$1" 2>/dev/null; }
alive() { # pid file: its process still runs, the same one (not a pid given out again)
  local pid when
  [ -s "$1" ] && read -r pid when <"$1" || return 1
  [ -n "$when" ] && [ "$(started_at "$pid")" = "$when" ]
}

web_answers() { # the portal serves its health page; a gunicorn that exited stops the wait
  alive "$RUN/web.pid" || fail "the portal (gunicorn) exited" "$RUN/web.log"
  curl -fsS -m 5 -o /dev/null "http://127.0.0.1:$WEB_PORT/health/"
}

start_bg() { # name, command...
  local name=$1; shift
  if alive "$RUN/$name.pid"; then echo "  $name already running (pid $(pid_of "$RUN/$name.pid"))"; return; fi
  nohup "$@" </dev/null >"$RUN/$name.log" 2>&1 &
  echo "$! $(started_at $!)" >"$RUN/$name.pid"
  echo "  started $name (pid $!, log $RUN/$name.log)"
}

demo_json() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$DEMO_DIR/cluster.json" "$1"; }

# A store holds the folder's telemetry as split now: a marker sample names the folder's "now"
# and the second store's claim (a changed VM_PARTITIONS loads both stores again).
marker_query() { # url, now: the store's answer (fails when it does not answer)
  curl -fsS -m 10 --get "$1/api/v1/query" --data-urlencode "time=$2" \
    --data-urlencode "query=last_over_time($MARKER{now=\"$2\",claim=\"$VM_PARTITIONS\"}[10m])" \
    2>/dev/null
}

backfilled() { # url, now: 0 it holds the marker, 1 it answered without; a store that does not
  # answer is asked again (a busy machine: one slow answer loaded everything twice), then fails
  local body deadline=$((SECONDS + WAIT))
  until body=$(marker_query "$1" "$2"); do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 did not answer a query within $WAIT s"
    sleep 1
  done
  grep -q '"value"' <<<"$body"
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
  # both loaders return once the store answers for what it took; wait anyway, bounded
  wait_for "the telemetry loaded into $url is not queryable" "" backfilled "$url" "$now"
}

point_clusters() {
  local rc=0
  # its stderr only when it fails: a locked or missing database is not "no cluster"
  manage shell -v 0 -c "
import sys
from apps.clusters.models import Cluster
n = Cluster.objects.filter(is_simulated=True).update(prometheus_url='$PROMETHEUS_URL')
print(f'  {n} simulated cluster(s) read Prometheus at $PROMETHEUS_URL')
sys.exit(0 if n else 3)" || rc=$?
  [ $rc = 0 ] || fail "$([ $rc = 3 ] && echo "no simulated cluster in the database; run make" \
    "demo-data first" || echo "pointing the simulated cluster at its stores failed (exit $rc)")"
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

start_store() { # label, script, port, url, run dir, readiness path, port variable:
  # start it unless it runs, then wait until it answers
  local name who log
  name=$(basename "$2" .sh)
  log=$5/$name-$3.log
  echo "== $1 on $4"
  if ! "$2" status >/dev/null 2>&1; then
    # a port another process holds (another test's server, a connection's local port) would
    # otherwise read as "exited" after a bind error, or as a stranger answering
    who=$(holder "$3" "$5/$name-$3.pid")
    [ -z "$who" ] || fail "$1 cannot start: 127.0.0.1:$3 is held by $who; choose another $7"
    touch "$RUN/$name-$3.ours"  # `down` stops only what `up` started, even half-started
    "$2" up | sed 's/^/  /' || fail "$1 did not come up on $4 ($2 up: its message above)" "$log"
  fi
  wait_for "$1 on $4" "$log" curl -fsS -m 5 -o /dev/null "$4/$6"
  echo "  $1 answers on $4"
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
  STEP="deploy/dev/services.sh up"
  ./deploy/dev/services.sh up
  STEP="the telemetry stores"
  start_store Prometheus "$PROM" "$PROM_PORT" "$PROMETHEUS_URL" "$PROM_RUN" -/ready PROM_PORT
  [ -z "$VM_PARTITIONS" ] ||
    start_store VictoriaMetrics "$VM" "$VM_PORT" "$VM_URL" "$VM_RUN" health VM_PORT
  STEP="pointing the cluster at its stores"
  point_clusters
  STEP="backfilling the stores"
  backfill "$(demo_json now)"
  STEP="starting Celery and the portal"
  echo "== Celery worker and beat on $REDIS_URL"
  start_bg worker "$BIN/celery" -A portal worker -Q sync,analysis -l info --concurrency 1
  start_bg beat "$BIN/celery" -A portal beat -l info --schedule "$RUN/celerybeat-schedule"
  echo "== portal (gunicorn) on http://127.0.0.1:$WEB_PORT"
  start_bg web "$BIN/gunicorn" portal.wsgi -b "127.0.0.1:$WEB_PORT" -w 2 --timeout 120
  wait_for "the portal on http://127.0.0.1:$WEB_PORT" "$RUN/web.log" web_answers
  for name in worker beat; do  # still there once the portal is: they started too
    alive "$RUN/$name.pid" || fail "the Celery $name exited" "$RUN/$name.log"
  done
  cat <<TXT

Running (stop with: make demo-full-stop, or deploy/dev/demo-full.sh down):
  portal      http://127.0.0.1:$WEB_PORT   (logins: the data folder's demo-logins.txt)
  Prometheus  $PROMETHEUS_URL   (deploy/dev/prometheus.sh; the demo month up to its "now")
$([ -z "$VM_PARTITIONS" ] || echo "  VictoriaMetrics $VM_URL   (deploy/dev/victoria-metrics.sh; the nodes of: $VM_PARTITIONS)")
  Celery      worker + beat on $REDIS_URL (logs $RUN/worker.log, $RUN/beat.log)
Live: job pages of running jobs, the archive, security detection and the guardrails (at the
simulated "now", nothing sent) read each node from its store; beat skips the simulated
cluster's Slurm syncs and quota checks (its Slurm files never change). deploy/dev/demo-full.sh help
TXT
}

stop_one() { # name: TERM, wait up to 20 s, then KILL; only the pid we recorded
  local name=$1 pid
  alive "$RUN/$name.pid" || { rm -f "$RUN/$name.pid"; return 0; }
  pid=$(pid_of "$RUN/$name.pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 80); do alive "$RUN/$name.pid" || break; sleep 0.25; done
  alive "$RUN/$name.pid" && kill -KILL "$pid" 2>/dev/null || true
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
    if alive "$RUN/$name.pid"; then echo "$name: up (pid $(pid_of "$RUN/$name.pid"))"; else echo "$name: down"; fi
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
