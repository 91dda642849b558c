#!/usr/bin/env bash
# A PostgreSQL 15 streaming replica of the loopback primary (127.0.0.1:5432), for the read
# replica tests (apps/core/replica.py, tests/integration/test_pg_replica.py).
#
#   allow   let the primary take replication connections from 127.0.0.1 (idempotent: one
#           pg_hba.conf line and a reload; checks wal_level and max_wal_senders). .ci/run calls it.
#   up      pg_basebackup -R from the primary into REPLICA_DIR, start it on REPLICA_PORT
#   down    stop it (fast) and remove REPLICA_DIR
#   status  is it answering, and is it in recovery
#
# REPLICA_PORT (5433) and REPLICA_DIR (/tmp/beacon-pg-replica-$REPLICA_PORT) choose where.
# Runs the server as the postgres user (initdb and postgres refuse root).
set -euo pipefail
cmd=${1:-status}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PRIMARY_PORT=${PRIMARY_PORT:-5432}
PORT=${REPLICA_PORT:-5433}
DIR=${REPLICA_DIR:-/tmp/beacon-pg-replica-$PORT}
LINE="host replication all 127.0.0.1/32 trust  # beacon: deploy/dev/pg-replica.sh"

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
primary() { psql -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -Atqc "$1"; }

allow() {
  local level senders hba
  level=$(primary "SHOW wal_level"); senders=$(primary "SHOW max_wal_senders")
  if [ "$level" = minimal ] || [ "$senders" = 0 ]; then
    echo "pg-replica: the primary has wal_level=$level, max_wal_senders=$senders;" \
         "set wal_level=replica and max_wal_senders>0 and restart it" >&2
    return 1
  fi
  hba=$(primary "SHOW hba_file")
  if ! grep -q '^host[[:space:]]\+replication[[:space:]]\+all[[:space:]]\+127.0.0.1/32' "$hba"; then
    echo "$LINE" >> "$hba"
    primary "SELECT pg_reload_conf()" >/dev/null
    echo "pg-replica: replication from 127.0.0.1 allowed in $hba"
  fi
}

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; }

up() {
  ready && { echo "pg-replica: already up on 127.0.0.1:$PORT"; return 0; }
  allow
  rm -rf "$DIR"; mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"
  as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -D "$DIR/data" \
    -R -X stream --checkpoint=fast --no-sync
  # Debian keeps the primary's configuration in /etc/postgresql, outside the data folder that
  # pg_basebackup copies: the replica gets its own (defaults, trust on loopback only)
  as_pg sh -c "printf '# beacon replica: settings on the command line\n' > '$DIR/data/postgresql.conf'
    printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' > '$DIR/data/pg_hba.conf'
    : > '$DIR/data/pg_ident.conf'"
  # a hot standby needs max_connections (and the like) at least the primary's
  local conns
  conns=$(primary "SHOW max_connections")
  as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/replica.log" -w -t 60 start -o \
    "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c hot_standby=on -c max_connections=$conns \
     -c shared_buffers=32MB -c hot_standby_feedback=on -c logging_collector=off"
  echo "pg-replica: streaming replica of 127.0.0.1:$PRIMARY_PORT up on 127.0.0.1:$PORT ($DIR)"
}

down() {
  if [ -f "$DIR/data/postmaster.pid" ]; then
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 60 stop || true
  fi
  rm -rf "$DIR"
}

case "$cmd" in
  allow) allow ;;
  up) up ;;
  down) down ;;
  status)
    if ready; then echo "replica: up on $PORT, in recovery: $(psql -h 127.0.0.1 -p "$PORT" \
      -U postgres -Atqc 'SELECT pg_is_in_recovery()')"; else echo "replica: down"; fi ;;
  *) echo "usage: $0 allow|up|down|status" >&2; exit 2 ;;
esac
