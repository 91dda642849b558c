#!/usr/bin/env bash
# Debian's nginx on loopback in front of a Beacon gunicorn, with the shipped proxy settings
# (deploy/nginx/beacon-proxy.conf): the serving path of docs/DEPLOY.md without TLS, for the
# slow-client test (tests/integration/test_nginx.py; issue 27 item 2).
#
#   deploy/dev/nginx.sh install   install Debian's nginx if missing (root); starts nothing
#   deploy/dev/nginx.sh up        install if missing, start, wait until it answers
#   deploy/dev/nginx.sh down      stop it (only the nginx of our pid file)
#   deploy/dev/nginx.sh status    running or not, and where
#
# Environment: NGINX_PORT (18080; nginx listens on 127.0.0.1 only), NGINX_UPSTREAM (the
# gunicorn, 127.0.0.1:8000), NGINX_DIR (config, pid, logs and buffers; default
# <repo>/var/nginx-<port>). The package's own service and /etc/nginx are left as they are.
# Never kills by process name: the pid file is trusted only while /proc/<pid>/cmdline still
# names our config file (nginx's master shows "nginx: master process ... -c <conf>").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PORT=${NGINX_PORT:-18080}
UPSTREAM=${NGINX_UPSTREAM:-127.0.0.1:8000}
BASE=${NGINX_DIR:-$ROOT/var/nginx-$PORT}
CONF=$BASE/nginx.conf
PIDFILE=$BASE/nginx.pid
URL=http://127.0.0.1:$PORT

binary() { command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; }; }

install_if_missing() {
  binary >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "nginx.sh: nginx missing; as root: apt-get install nginx" >&2
    return 1
  fi
  echo "nginx.sh: installing Debian's nginx"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=900 update -q
  apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends nginx
}

our_pid() {
  # Prints the master's pid only if it is alive and still runs our config.
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONF" || return 1
  echo "$pid"
}

alive() { [ -d "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# Any HTTP answer counts (a 502 while the upstream is down still means nginx is serving).
serving() { [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$URL/health/" || true)" != 000 ]; }

write_conf() {
  mkdir -p "$BASE/tmp"
  local user=""
  if [ "$(id -u)" = 0 ]; then
    # root's nginx runs its workers as www-data, which must write the body buffers
    user="user www-data;"
    chown www-data "$BASE/tmp"
  fi
  cat >"$CONF" <<EOF
# written by deploy/dev/nginx.sh: loopback only, no TLS; the proxy settings are the shipped ones
$user
worker_processes 1;
pid $PIDFILE;
error_log $BASE/error.log warn;
events { worker_connections 1024; }
http {
    access_log $BASE/access.log;
    client_body_temp_path $BASE/tmp/body;
    proxy_temp_path $BASE/tmp/proxy;
    fastcgi_temp_path $BASE/tmp/fastcgi;
    uwsgi_temp_path $BASE/tmp/uwsgi;
    scgi_temp_path $BASE/tmp/scgi;
    upstream beacon_web { server $UPSTREAM; keepalive 16; }
    server {
        listen 127.0.0.1:$PORT;
        include $ROOT/deploy/nginx/beacon-proxy.conf;
        location / { proxy_pass http://beacon_web; }
    }
}
EOF
}

start() {
  if our_pid >/dev/null; then return 0; fi
  if serving; then
    echo "nginx.sh: $URL is answering but is not ours (no valid $PIDFILE)" >&2
    return 1
  fi
  write_conf
  "$(binary)" -t -q -p "$BASE" -c "$CONF" || { echo "nginx.sh: $CONF does not pass nginx -t" >&2; return 1; }
  "$(binary)" -p "$BASE" -c "$CONF"  # daemonizes; the master writes $PIDFILE
  for _ in $(seq 1 120); do
    if serving && our_pid >/dev/null; then return 0; fi
    sleep 0.25
  done
  echo "nginx.sh: not serving after 30 s; see $BASE/error.log" >&2
  tail -5 "$BASE/error.log" >&2 || true
  return 1
}

stop() {
  # QUIT (finish what is in flight), then TERM; wait up to 30 s. Nothing when not ours.
  local pid
  if ! pid=$(our_pid); then rm -f "$PIDFILE"; return 0; fi
  kill -QUIT "$pid"
  for i in $(seq 1 120); do
    alive "$pid" || { rm -f "$PIDFILE"; return 0; }
    [ "$i" = 40 ] && kill -TERM "$pid"
    sleep 0.25
  done
  echo "nginx.sh: pid $pid did not stop within 30 s" >&2
  return 1
}

case "${1:-status}" in
  install) install_if_missing; echo "nginx: $(binary) ($("$(binary)" -v 2>&1))" ;;
  up) install_if_missing; start; echo "nginx: up on $URL in front of $UPSTREAM ($BASE)" ;;
  down) stop; echo "nginx: down" ;;
  status)
    if pid=$(our_pid) && serving; then echo "nginx: up on $URL (pid $pid)"; else echo "nginx: down ($URL)"; exit 3; fi ;;
  *) echo "usage: $0 install|up|down|status" >&2; exit 2 ;;
esac
