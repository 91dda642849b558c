#!/usr/bin/env bash
# Make sure the local PostgreSQL 15 and Redis 7 answer on loopback (CI and tests).
# up: start whichever is down (Debian packages; installed if missing, as root). status: report.
set -euo pipefail
cmd=${1:-status}

pg_ok() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_ok() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }

pg_up() {
  pg_ok && return 0
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    apt-get -o DPkg::Lock::Timeout=600 update -q
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q postgresql-15
  fi
  pg_ctlcluster --skip-systemctl-redirect 15 main start
  for _ in $(seq 1 60); do pg_ok && return 0; sleep 0.5; done
  echo "services: PostgreSQL did not come up on 127.0.0.1:5432" >&2; return 1
}

redis_up() {
  redis_ok && return 0
  if ! command -v redis-server >/dev/null 2>&1; then
    apt-get -o DPkg::Lock::Timeout=600 update -q
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q redis-server
  fi
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 40); do redis_ok && return 0; sleep 0.25; done
  echo "services: Redis did not come up on 127.0.0.1:6379" >&2; return 1
}

case "$cmd" in
  up) pg_up; redis_up; echo "services: PostgreSQL and Redis are up" ;;
  status)
    pg_ok && echo "postgresql: up" || echo "postgresql: down"
    redis_ok && echo "redis: up" || echo "redis: down" ;;
  *) echo "usage: $0 up|status" >&2; exit 2 ;;
esac
