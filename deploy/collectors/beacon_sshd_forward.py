#!/usr/bin/env python3
"""beacon-sshd-forward: sshd's log lines from a node to Beacon's ingest API.

Two ways in, one way out (``BEACON_URL/api/v1/security/ingest/sshd/``, ``Authorization:
Token ...``, batches of at most 500 lines or 1 MB, every 5 s):

- ``--journal``: follows systemd's journal (``journalctl -f -o json -t sshd -t
  sshd-session``). After each batch Beacon stored, the journal cursor of its last line is
  saved (``--state``), so a restart resumes there: nothing is lost or sent twice while
  Beacon is down, the journal keeps the lines.
- ``--stdin`` (the default): lines on standard input, as rsyslog's ``omprog`` hands them
  over (template ``RSYSLOG_FileFormat``: ``2026-11-02T12:05:00.123+01:00 gpu04
  sshd[4821]: Accepted ...``) or as ``tail -F /var/log/auth.log`` prints them. Lines of
  other programs are dropped here; Beacon would skip them anyway.

While Beacon cannot be reached, batches are retried (1 s doubling to 60 s) and kept in
memory up to ``--max-buffer`` lines; beyond that the oldest are dropped and counted on
stderr. Beacon de-duplicates lines, so a batch sent twice stores nothing twice.
Python 3.6+, standard library only. See deploy/collectors/README.md.
"""

import argparse
import collections
import datetime
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

CONFIG = "/etc/beacon/collector.conf"
INGEST_PATH = "/api/v1/security/ingest/sshd/"
PROGRAMS = ("sshd", "sshd-session")
MAX_LINES, MAX_BYTES, MAX_LINE = 500, 1000000, 4096
# "<timestamp> <host> sshd[pid]: " (RFC 3339) or "Nov  2 12:05:00 <host> sshd[pid]: " (BSD)
_SSHD = re.compile(r"^(?:\S+|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) \S+ (?:sshd|sshd-session)"
                   r"\[\d+\]: ")


def log(message):
    sys.stderr.write(f"beacon-sshd-forward: {message}\n")
    sys.stderr.flush()


def read_config(path):
    values = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    key, _, value = line.partition("=")
                    values[key.strip()] = value.strip().strip("'\"")
    except OSError:
        pass
    return values


# --- Lines ----------------------------------------------------------------------------------


def journal_line(entry):
    """A journal entry (``journalctl -o json``) as the syslog line sshd would have written:
    ``<RFC 3339 UTC> <host> <program>[<pid>]: <message>``; None if it is not sshd's."""
    program = entry.get("SYSLOG_IDENTIFIER") or entry.get("_COMM") or ""
    if program not in PROGRAMS:
        return None
    message = entry.get("MESSAGE")
    if isinstance(message, list):  # journalctl writes non-UTF-8 messages as byte arrays
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256) \
            .decode("utf-8", "replace")
    if not isinstance(message, str):
        return None
    try:
        micros = int(entry.get("__REALTIME_TIMESTAMP", ""))
    except ValueError:
        return None
    stamp = datetime.datetime.fromtimestamp(micros / 1e6, datetime.timezone.utc)
    pid = entry.get("SYSLOG_PID") or entry.get("_PID") or "0"
    host = entry.get("_HOSTNAME") or "unknown"
    line = f"{stamp.isoformat()} {host} {program}[{pid}]: {message.rstrip()}"
    return line[:MAX_LINE + 1]


def is_sshd(line):
    return bool(_SSHD.match(line))


# --- Posting --------------------------------------------------------------------------------


class Sender:
    """Batches lines and posts them; retries while Beacon is away (bounded memory)."""

    def __init__(self, url, token, cluster, max_buffer, timeout, state=None):
        if not url.startswith(("https://", "http://")):
            raise ValueError("BEACON_URL must start with https:// (or http:// for a test)")
        self.endpoint = url.rstrip("/") + INGEST_PATH
        self.token, self.cluster, self.timeout = token, cluster, timeout
        self.pending = collections.deque()  # (line, cursor)
        self.max_buffer, self.dropped, self.state = max_buffer, 0, state
        self.sent = self.stored = 0
        self.last_flush = time.monotonic()
        self.backoff, self.retry_at = 1.0, 0.0

    def add(self, line, cursor=None):
        self.pending.append((line, cursor))
        while len(self.pending) > self.max_buffer:
            self.pending.popleft()
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10000 == 0:
                log(f"Beacon unreachable: {self.dropped} line(s) dropped so far")

    def due(self, every):
        return bool(self.pending) and (len(self.pending) >= MAX_LINES
                                       or time.monotonic() - self.last_flush >= every)

    def flush(self, force=False):
        """Post what is pending, batch by batch; False when Beacon did not take it."""
        while self.pending:
            if not force and time.monotonic() < self.retry_at:
                return False
            batch, size = [], 0
            for line, cursor in self.pending:
                if len(batch) >= MAX_LINES or size + len(line) > MAX_BYTES:
                    break
                batch.append((line, cursor))
                size += len(line) + 4
            try:
                result = self._post([line for line, _ in batch])
            except RuntimeError as exc:
                log(f"{exc}; retrying in {self.backoff:g} s")
                self.retry_at = time.monotonic() + self.backoff
                self.backoff = min(self.backoff * 2, 60.0)
                return False
            for _ in batch:
                self.pending.popleft()
            self.backoff, self.retry_at = 1.0, 0.0
            self.sent += len(batch)
            self.stored += result.get("stored", 0)
            cursors = [cursor for _, cursor in batch if cursor]
            if cursors and self.state:
                save_cursor(self.state, cursors[-1])
        self.last_flush = time.monotonic()
        return True

    def _post(self, lines):
        body = json.dumps({"cluster": self.cluster, "lines": lines}).encode()
        request = urllib.request.Request(  # noqa: S310 (the scheme is checked in __init__)
            self.endpoint, data=body, method="POST",
            headers={"Content-Type": "application/json", "Authorization": "Token " + self.token,
                     "User-Agent": "beacon-sshd-forward/1"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return json.loads(response.read().decode() or "{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code in (400, 401, 403, 404):
                # Beacon refuses this batch or this token: retrying will not help.
                raise SystemExit(f"beacon-sshd-forward: Beacon answered {exc.code}: "
                                 f"{detail}") from None
            raise RuntimeError(f"Beacon answered {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RuntimeError(f"cannot reach Beacon: {exc}") from None


def load_cursor(path):
    try:
        with open(path) as f:
            return f.read().strip() or None
    except OSError:
        return None


def save_cursor(path, cursor):
    """Write the cursor atomically: a crash leaves the old one or the new one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(cursor + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- Sources --------------------------------------------------------------------------------


# Set by SIGTERM/SIGINT: the main loop stops between batches, never inside one, so a
# batch Beacon stored always has its cursor saved (a restart then sends nothing twice).
STOP = threading.Event()


def pump(items, sender, every):
    """Feed ``(line, cursor)`` items to the sender, flushing every ``every`` seconds even
    while no line comes (a reader thread waits on the source, this one on the clock)."""
    queue_ = queue.Queue(maxsize=10000)
    done = object()

    def read():
        try:
            for item in items:
                queue_.put(item)
        finally:
            queue_.put(done)

    threading.Thread(target=read, name="reader", daemon=True).start()
    while not STOP.is_set():
        try:
            item = queue_.get(timeout=max(0.1, min(every / 2, 1.0)))
        except queue.Empty:
            item = None
        if item is done:
            return
        if item is not None:
            sender.add(*item)
        if sender.due(every):
            sender.flush()


def stdin_items(stream):
    for raw in stream:
        line = raw.rstrip("\r\n")
        if is_sshd(line):
            yield line[:MAX_LINE + 1], None


def journal_command(cursor, follow, extra):
    argv = ["journalctl", "-o", "json", "--no-pager", "--output-fields=MESSAGE,"
            "SYSLOG_IDENTIFIER,SYSLOG_PID,_PID,_HOSTNAME,_COMM"]
    argv += [arg for program in PROGRAMS for arg in ("-t", program)]
    if cursor:
        argv += ["--after-cursor", cursor]
    elif not any(arg.startswith(("--since", "-S")) for arg in extra):
        argv += ["--since", "now"]  # first start: from now on (add --since=... to backfill)
    if follow:
        argv.append("-f")
    return argv + list(extra)


def journal_items(child):
    for raw in child.stdout:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        line = journal_line(entry) if isinstance(entry, dict) else None
        if line is not None:
            yield line, entry.get("__CURSOR")


def from_journal(sender, every, state, follow, extra):
    child = subprocess.Popen(journal_command(load_cursor(state), follow, extra),
                             stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    try:
        pump(journal_items(child), sender, every)
    finally:
        if child.poll() is None:
            child.terminate()
        child.wait()
    if child.returncode not in (0, -signal.SIGTERM):
        log(f"journalctl exited with {child.returncode}")


def arguments(argv):
    parser = argparse.ArgumentParser(prog="beacon-sshd-forward",
                                     description="Forward sshd's log lines to Beacon.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stdin", action="store_true", help="read lines on stdin (default)")
    source.add_argument("--journal", action="store_true", help="follow the systemd journal")
    parser.add_argument("--no-follow", action="store_true",
                        help="journal: send what is there and stop (a catch-up run)")
    parser.add_argument("--journal-arg", action="append", default=[],
                        help="extra journalctl argument (e.g. --directory=/var/log/journal)")
    parser.add_argument("--config", default=os.environ.get("BEACON_COLLECTOR_CONFIG", CONFIG))
    parser.add_argument("--url")
    parser.add_argument("--cluster")
    parser.add_argument("--token-file")
    parser.add_argument("--state", help="journal cursor file (default "
                                        "/var/lib/beacon/sshd-forward.cursor)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between batches")
    parser.add_argument("--max-buffer", type=int, default=100000,
                        help="lines kept while Beacon is unreachable")
    parser.add_argument("--timeout", type=float, default=30.0)
    return parser.parse_args(argv)


def main(argv=None, stream=None):
    args = arguments(argv)
    conf = read_config(args.config)

    def setting(value, key, default=""):
        return value or os.environ.get(key) or conf.get(key) or default

    url, cluster = setting(args.url, "BEACON_URL"), setting(args.cluster, "BEACON_CLUSTER")
    token_file = setting(args.token_file, "BEACON_TOKEN_FILE", "/etc/beacon/collector.token")
    state = setting(args.state, "BEACON_SSHD_STATE", "/var/lib/beacon/sshd-forward.cursor")
    if not (url and cluster):
        log("set BEACON_URL and BEACON_CLUSTER (or --url, --cluster)")
        return 1
    token = os.environ.get("BEACON_TOKEN", "").strip()
    if not token:
        try:
            with open(token_file) as f:
                token = f.read().strip()
        except OSError as exc:
            log(f"cannot read the token file {token_file}: {exc}")
            return 1
    sender = Sender(url, token, cluster, args.max_buffer, args.timeout,
                    state if args.journal else None)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: STOP.set())  # then: flush, then exit
    try:
        if args.journal:
            from_journal(sender, args.every, state, not args.no_follow, args.journal_arg)
        else:
            pump(stdin_items(stream or sys.stdin), sender, args.every)
    finally:
        deadline = time.monotonic() + args.timeout
        while not sender.flush(force=True) and time.monotonic() < deadline:
            time.sleep(min(sender.backoff, 5.0))
        log(f"sent {sender.sent} line(s), Beacon stored {sender.stored}, "
            f"{len(sender.pending)} unsent, {sender.dropped} dropped")
    return 0 if not sender.pending else 2


if __name__ == "__main__":
    sys.exit(main())
