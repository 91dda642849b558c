#!/usr/bin/env bash
# pgbouncer (Debian's package) in transaction pooling mode in front of the loopback
# PostgreSQL (127.0.0.1:5432), for tests/integration/test_pgbouncer.py and trying it out.
#
#   up      write PGB_DIR/pgbouncer.ini and start it on 127.0.0.1:PGB_PORT (as postgres)
#   down    stop it and remove PGB_DIR
#   status  is it answering
#
# Every database name is passed through to the same name on the primary; trust auth, as the
# dev primary has. Point Beacon at it with DATABASE_URL=postgres://postgres@127.0.0.1:PGB_PORT/db
# and DATABASE_TRANSACTION_POOLING=true (docs/DEPLOY.md "PostgreSQL at scale").
set -euo pipefail
cmd=${1:-status}
PORT=${PGB_PORT:-6433}
DIR=${PGB_DIR:-/tmp/beacon-pgbouncer-$PORT}

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
ready() { pg_isready -q -h 127.0.0.1 -p "$PORT" -d pgbouncer 2>/dev/null; }

up() {
  ready && { echo "pgbouncer: already up on 127.0.0.1:$PORT"; return 0; }
  command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || {
    echo "pgbouncer: not installed (apt-get install pgbouncer)" >&2; return 1; }
  rm -rf "$DIR"; mkdir -p "$DIR"
  printf '"postgres" ""\n' > "$DIR/userlist.txt"
  cat > "$DIR/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 200
default_pool_size = 10
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
INI
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$DIR"
  as_pg /usr/sbin/pgbouncer -d "$DIR/pgbouncer.ini"
  for _ in $(seq 1 40); do ready && break; sleep 0.25; done
  ready || { echo "pgbouncer: did not come up; $(tail -5 "$DIR/pgbouncer.log")" >&2; return 1; }
  echo "pgbouncer: transaction pooling on 127.0.0.1:$PORT in front of 127.0.0.1:5432 ($DIR)"
}

down() {
  if [ -f "$DIR/pgbouncer.pid" ]; then
    pid=$(cat "$DIR/pgbouncer.pid")
    # A pid file left by a pgbouncer that died may name a pid the kernel gave out again
    # (pid_max 32768 turns over within a CI run): only a pgbouncer gets the signal.
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = pgbouncer ]; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  fi
  rm -rf "$DIR"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  status) if ready; then echo "pgbouncer: up on $PORT"; else echo "pgbouncer: down"; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
