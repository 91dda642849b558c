"""sshd syslog lines to events: logins, ``pam_slurm_adopt`` denials, failed passwords.

Two timestamp styles are read: classic syslog (``Nov  1 18:40:05 gpu04 sshd[4609]: ...``,
no year: the year is the one that puts the line at or before ``reference`` plus a day)
and RFC 3339 / RFC 5424 (``2026-11-01T18:40:05.123+00:00 gpu04 sshd[4609]: ...``).
Newer OpenSSH logs from ``sshd-session`` (9.8 and later); both names are accepted.

Lines are untrusted: anything longer than ``MAX_LINE`` is refused before a regex sees
it, every pattern is anchored and bounded, and a line that is not one of the events
below is ``None`` (the caller counts what it skipped). Nothing here raises on input.
"""

from __future__ import annotations

import bisect
import calendar
import ipaddress
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from apps.analysis.security_types import SshEvent

MAX_LINE = 4096
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_SYSLOG = re.compile(r"^(?P<mon>[A-Za-z]{3}) {1,2}(?P<day>\d{1,2}) (?P<time>\d{2}:\d{2}:\d{2}) "
                     r"(?P<host>[A-Za-z0-9._-]{1,253}) (?P<rest>.{1,4000})$")
_ISO = re.compile(r"^(?:<\d{1,3}>\d? ?)?(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}"
                  r"(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?) (?P<host>[A-Za-z0-9._-]{1,253}) "
                  r"(?P<rest>.{1,4000})$")
_PROGRAM = re.compile(r"^(?:sshd|sshd-session)\[(?P<pid>\d{1,10})\]: (?P<msg>.{1,3900})$")
_USER = r"(?P<user>[A-Za-z0-9._@-]{1,64})"
_SOURCE = r"(?P<ip>[0-9A-Fa-f:.]{2,45}) port (?P<port>\d{1,5})"
_MESSAGES = (
    ("accepted", re.compile(rf"^Accepted (?P<method>[a-z0-9/-]{{1,40}}) for {_USER} from "
                            rf"{_SOURCE}")),
    ("failed", re.compile(rf"^Failed (?P<method>[a-z0-9/-]{{1,40}}) for (?:invalid user )?"
                          rf"{_USER} from {_SOURCE}")),
    ("denied", re.compile(r"^(?:pam_slurm_adopt(?:\[\d{1,10}\])?: )?Access denied by "
                          r"pam_slurm_adopt: you have no active jobs on this node")),
    ("closed_preauth", re.compile(rf"^Connection closed by authenticating user {_USER} "
                                  rf"{_SOURCE} \[preauth\]")),
)


@dataclass(frozen=True)
class SshRecord:
    """One sshd event: ``kind`` is accepted, failed, denied or closed_preauth."""

    t: float
    host: str
    kind: str
    pid: int
    user: str = ""
    source: str = ""
    method: str = ""


def parse_line(line: str, reference: float) -> SshRecord | None:
    """The event on one log line, or None (not sshd, not an event we use, malformed)."""
    if not isinstance(line, str) or len(line) > MAX_LINE:
        return None
    line = line.rstrip("\r\n")
    stamped = _stamp(line, reference)
    if stamped is None:
        return None
    t, host, rest = stamped
    program = _PROGRAM.match(rest)
    if program is None:
        return None
    for kind, pattern in _MESSAGES:
        match = pattern.match(program.group("msg"))
        if match is not None:
            return _record(kind, match, t, host, int(program.group("pid")))
    return None


def _record(kind: str, match: re.Match[str], t: float, host: str, pid: int) -> SshRecord | None:
    fields = match.groupdict()
    source = fields.get("ip") or ""
    if source and not _is_ip(source):
        return None
    return SshRecord(t, host.split(".")[0].lower(), kind, pid, fields.get("user") or "",
                     source, fields.get("method") or "")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _stamp(line: str, reference: float) -> tuple[float, str, str] | None:
    match = _SYSLOG.match(line)
    if match is not None:
        t = _syslog_time(match["mon"], int(match["day"]), match["time"], reference)
        return (t, match["host"], match["rest"]) if t is not None else None
    match = _ISO.match(line)
    if match is not None:
        t = _iso_time(match["ts"])
        return (t, match["host"], match["rest"]) if t is not None else None
    return None


def _syslog_time(mon: str, day: int, clock: str, reference: float) -> float | None:
    """Classic syslog has no year: take the latest year not more than a day ahead."""
    month = _MONTHS.get(mon.lower())
    if month is None:
        return None
    year = datetime.fromtimestamp(reference, UTC).year if reference > 0 else 1970
    hh, mm, ss = (int(x) for x in clock.split(":"))
    for candidate in (year + 1, year, year - 1):
        try:
            t = calendar.timegm((candidate, month, day, hh, mm, ss, 0, 0, 0))
            datetime(candidate, month, day, hh, mm, ss)  # validates day and time ranges
        except ValueError:
            continue
        if t <= reference + 86400:
            return float(t)
    return None


def _iso_time(text: str) -> float | None:
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.replace(" ", "T", 1))  # at most microseconds
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    elif re.search(r"[+-]\d{4}$", text):
        text = f"{text[:-2]}:{text[-2:]}"
    try:
        stamp = datetime.fromisoformat(text[:32])
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None  # no zone: refuse rather than guess
    return stamp.timestamp()


def events(records: list[SshRecord], pair_within: float = 2.0) -> list[SshEvent]:
    """Records to the events the SSH rules read, in time order.

    A ``pam_slurm_adopt`` denial names no user or address; sshd logs them on the
    "Connection closed by authenticating user U ADDR ... [preauth]" line that follows
    (same pid, or the same host within ``pair_within`` seconds), so the two are joined.
    """
    closes: dict[str, list[SshRecord]] = {}
    for record in sorted(records, key=lambda r: r.t):
        if record.kind == "closed_preauth":
            closes.setdefault(record.host, []).append(record)
    times = {host: [c.t for c in items] for host, items in closes.items()}
    used: set[int] = set()
    out = []
    for record in records:
        if record.kind == "closed_preauth":
            continue
        if record.kind == "denied":
            partner = _partner(record, closes.get(record.host, []), times.get(record.host, []),
                               used, pair_within)
            if partner is not None:
                record = SshRecord(record.t, record.host, "denied", record.pid, partner.user,
                                   partner.source, "")
        out.append(SshEvent(record.t, record.host, record.kind, record.user, record.source,
                            record.method))
    return sorted(out, key=lambda e: (e.t, e.host))


def _partner(denial: SshRecord, closes: list[SshRecord], times: list[float], used: set[int],
             within: float) -> SshRecord | None:
    """The first unused close on the denial's host within ``within`` seconds after it,
    preferring the same pid."""
    lo = bisect.bisect_left(times, denial.t)
    hi = bisect.bisect_right(times, denial.t + within)
    fits = [(closes[i].pid != denial.pid, i) for i in range(lo, hi) if id(closes[i]) not in used]
    if not fits:
        return None
    chosen = closes[min(fits)[1]]
    used.add(id(chosen))
    return chosen
