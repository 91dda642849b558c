# Sourced by the dev scripts that start a server on loopback (prometheus.sh,
# victoria-metrics.sh, node-exporter.sh). They need PIDFILE (where the started pid is kept),
# LISTEN (host:port, as passed to --web.listen-address, or to the flag LISTEN_FLAG names:
# victoria-metrics.sh's -httpListenAddr) and NAME (for messages); `launch` and `wait_ready`
# also need LOG, SERVER (the server's name in messages) and a `ready` function (the server
# answers). Never kills by process name: the pid file is trusted only while
# /proc/<pid>/cmdline still holds our listen address (pid reuse guard).

our_pid() {
  # Prints the pid only if it is alive and still is our server.
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "${LISTEN_FLAG:---web.listen-address}=$LISTEN" || return 1
  echo "$pid"
}

# alive PID: the process exists and is not a zombie (PID 1 may reap slowly)
alive() { [ -d "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

stop() {
  # TERM our server and wait up to 30 s for it to go; nothing to do when it is not ours.
  local pid
  if ! pid=$(our_pid); then rm -f "$PIDFILE"; return 0; fi
  kill -TERM "$pid"
  for _ in $(seq 1 120); do
    alive "$pid" || { rm -f "$PIDFILE"; return 0; }
    sleep 0.25
  done
  echo "$NAME: pid $pid did not stop within 30 s" >&2
  return 1
}

# launch CMD [ARG...]: start the server, keep its pid in PIDFILE, wait until it is ready.
launch() {
  mkdir -p "$(dirname "$PIDFILE")" "$(dirname "$LOG")"
  # setsid: the server outlives this shell and its job control.
  setsid "$@" </dev/null >"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  wait_ready
}

wait_ready() {
  # Watch the pid we started, not its cmdline: between fork and exec the child still shows
  # this script's cmdline, and reading it then made a healthy start look like an exit (a CI
  # flake under load). The cmdline guard is for pid files read later (our_pid).
  # A deadline in seconds (READY_WAIT, 120), not a count of tries: on a busy machine each
  # try (a curl of up to 2 s, a sleep) takes longer, and 240 of them ran for minutes, past
  # the caller's own timeout, so the caller was killed before this could say why.
  local pid wait=${READY_WAIT:-120} deadline
  deadline=$((SECONDS + ${READY_WAIT:-120}))
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  while :; do
    ready && return 0
    if [ -z "$pid" ] || ! alive "$pid"; then
      echo "$NAME: $SERVER exited; see $LOG" >&2; tail -5 "$LOG" >&2; return 1
    fi
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 0.5
  done
  echo "$NAME: $SERVER (pid $pid) not ready on $LISTEN after $wait s; see $LOG" >&2
  tail -5 "$LOG" >&2
  return 1
}
