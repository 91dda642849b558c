"""sshd log lines to events: both timestamp styles, the year guessed from the reference,
denials joined to the line naming who was denied, hostile lines refused."""

from __future__ import annotations

import pytest

from apps.analysis.sshd_log import MAX_LINE, SshRecord, events, parse_line

REF = 1795996800.0  # 2026-11-30T00:00:00Z


@pytest.mark.parametrize(("line", "expected"), [
    ("Nov  1 18:40:05 gpu04 sshd[4609]: Accepted publickey for leo from 10.20.2.43 port 50141 "
     "ssh2: ED25519 SHA256:abc", SshRecord(1793558405.0, "gpu04", "accepted", 4609, "leo",
                                           "10.20.2.43", "publickey")),
    ("Nov 29 10:00:00 gpu02 sshd[123]: pam_slurm_adopt: Access denied by pam_slurm_adopt: you "
     "have no active jobs on this node", SshRecord(1795946400.0, "gpu02", "denied", 123)),
    ("Nov 29 10:00:01 gpu02 sshd[124]: Connection closed by authenticating user bob 10.20.1.2 "
     "port 4000 [preauth]", SshRecord(1795946401.0, "gpu02", "closed_preauth", 124, "bob",
                                      "10.20.1.2")),
    ("Nov 29 10:00:00 gpu02 sshd[9]: Failed password for invalid user admin from 10.0.0.1 port "
     "22 ssh2", SshRecord(1795946400.0, "gpu02", "failed", 9, "admin", "10.0.0.1", "password")),
    ("2026-11-01T18:40:05.123456789+00:00 gpu04.hpc.example sshd-session[4609]: Accepted "
     "password for leo from ::1 port 5 ssh2",
     SshRecord(1793558405.123456, "gpu04", "accepted", 4609, "leo", "::1", "password")),
    ("<38>1 2026-11-01T19:40:05+01:00 gpu04 sshd[1]: Accepted publickey for leo from 10.0.0.2 "
     "port 5 ssh2", SshRecord(1793558405.0, "gpu04", "accepted", 1, "leo", "10.0.0.2",
                              "publickey")),  # a priority prefix and another offset
    ("Dec 31 23:59:59 gpu02 sshd[1]: Accepted publickey for bob from 10.0.0.1 port 1 ssh2",
     SshRecord(1767225599.0, "gpu02", "accepted", 1, "bob", "10.0.0.1", "publickey")),
])
def test_lines_become_records(line, expected):
    assert parse_line(line, REF) == expected


@pytest.mark.parametrize("line", [
    "", "garbage", "x" * (MAX_LINE + 1),
    "Feb 30 10:00:00 gpu02 sshd[1]: Accepted publickey for bob from 1.2.3.4 port 1 ssh2",
    "Nov 29 10:00:00 gpu02 sshd[1]: Accepted publickey for bob from 999.2.3.4 port 1 ssh2",
    "Nov 29 10:00:00 gpu02 cron[1]: Accepted publickey for bob from 1.2.3.4 port 1 ssh2",
    "2026-11-01T18:40:05 gpu04 sshd[1]: Accepted password for leo from ::1 port 5 ssh2",
    "Nov 29 10:00:00 gpu02 sshd[1]: Accepted publickey for " + "b" * 3000 + " from 1.2.3.4",
    "Nov 29 10:00:00 gpu02 sshd[1]: Accepted publickey for bob\nfrom 1.2.3.4 port 1 ssh2",
    "Nov 29 10:00:00 gpu02 sshd[1]: Received disconnect from 10.0.0.1 port 1:11: bye",
])
def test_other_or_malformed_lines_are_none(line):
    assert parse_line(line, REF) is None


def test_non_text_is_none():
    assert parse_line(None, REF) is None  # type: ignore[arg-type]
    assert parse_line(b"bytes", REF) is None  # type: ignore[arg-type]


def test_a_denial_gets_the_user_and_address_of_the_close_that_follows():
    denial = SshRecord(100.0, "gpu02", "denied", 7)
    close = SshRecord(100.5, "gpu02", "closed_preauth", 8, "eve", "10.9.9.9")
    other = SshRecord(100.5, "gpu03", "closed_preauth", 9, "bob", "10.1.1.1")
    late = SshRecord(200.0, "gpu02", "denied", 10)
    [first, second] = events([late, other, close, denial])
    assert (first.kind, first.user, first.source) == ("denied", "eve", "10.9.9.9")
    assert (second.user, second.source) == ("", "")
