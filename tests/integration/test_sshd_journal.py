"""The sshd forwarder on a real journald: a private journal namespace (so the machine's own
journal is untouched) in a UTS namespace named like a compute node, lines sent the way
sshd sends them (syslog socket, ``sshd[pid]:`` tag), ``journalctl -f`` followed by
``deploy/collectors/beacon_sshd_forward.py --journal`` into a live Beacon: lines arrive
while the journal is followed, and a restart resumes after the saved cursor."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User

from apps.accounts import tokens
from apps.clusters.models import Cluster
from apps.security.defaults import seed
from apps.security.models import SshLogEvent
from tests.integration.services import require

pytestmark = [pytest.mark.integration("journald"), pytest.mark.slow,
              pytest.mark.django_db(transaction=True)]
JOURNALD = "/lib/systemd/systemd-journald"
FORWARDER = Path(__file__).resolve().parents[2] / "deploy" / "collectors" / \
    "beacon_sshd_forward.py"


@pytest.fixture
def journal(tmp_path: Path) -> Any:
    """A journald of its own (namespace ``beacontest<pid>``), host name gpu04."""
    require(os.geteuid() == 0 and Path(JOURNALD).exists() and bool(shutil.which("unshare"))
            and bool(shutil.which("logger")) and bool(shutil.which("journalctl")),
            "journald (root, systemd, util-linux)", "apt-get install systemd util-linux bsdutils")
    name = f"beacontest{os.getpid()}"
    process = subprocess.Popen(["unshare", "--uts", "sh", "-c",
                                f"hostname gpu04; exec {JOURNALD} {name}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socket = Path(f"/run/systemd/journal.{name}/dev-log")
    deadline = time.monotonic() + 20
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert socket.exists(), "journald did not start"
        yield name, socket
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        for folder in (*Path("/var/log/journal").glob(f"*.{name}"),
                       *Path("/run/log/journal").glob(f"*.{name}"),
                       Path(f"/run/systemd/journal.{name}")):
            shutil.rmtree(folder, ignore_errors=True)


def sshd_says(socket: Path, pid: int, message: str, program: str = "sshd") -> None:
    subprocess.run(["logger", f"--socket={socket}", "-t", program, f"--id={pid}", message],
                   check=True)


def wait_for(count: int, timeout: float = 30) -> list[SshLogEvent]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = list(SshLogEvent.objects.order_by("at"))
        if len(events) >= count:
            return events
        time.sleep(0.2)
    return list(SshLogEvent.objects.order_by("at"))


def test_the_forwarder_follows_a_real_journal_and_resumes_after_its_cursor(live_server, journal,
                                                                           tmp_path):
    name, socket = journal
    seed(apps)
    Cluster.objects.create(name="devcluster", display_name="Dev")
    _, key = tokens.create(User.objects.create_user("collector", is_staff=True), "collector")
    env = {"PATH": os.environ["PATH"], "BEACON_TOKEN": key,
           "BEACON_COLLECTOR_CONFIG": str(tmp_path / "none.conf")}
    state = tmp_path / "cursor"
    args = [sys.executable, str(FORWARDER), "--journal", "--url", live_server.url, "--cluster",
            "devcluster", "--state", str(state), "--every", "0.5",
            f"--journal-arg=--namespace={name}"]
    follower = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    # Stopped right as Beacon stores the lines (the moment a race would lose a cursor):
    # the stop waits for the batch, so the restart below sends nothing twice.
    try:
        time.sleep(1.0)  # journalctl -f is reading (the first start sends from now on)
        sshd_says(socket, 48211, "Accepted publickey for mallory from 10.9.9.9 port 50412 ssh2: "
                                 "ED25519 SHA256:Qm9ndXM")
        sshd_says(socket, 48377, "Accepted publickey for bob from 10.20.0.9 port 51000 ssh2",
                  "sshd-session")
        sshd_says(socket, 48400, "(root) CMD (run-parts /etc/cron.hourly)", "CRON")
        events = wait_for(2)  # sent while followed, without waiting for more lines
        assert [(e.host, e.kind, e.user_name) for e in events] == [
            ("gpu04", "accepted", "mallory"), ("gpu04", "accepted", "bob")]
    finally:
        follower.send_signal(signal.SIGTERM)
        _, err = follower.communicate(timeout=30)
    assert "Beacon stored 2, 0 unsent" in err
    cursor = state.read_text().strip()
    # While the forwarder is stopped sshd goes on logging; the next start sends only that.
    sshd_says(socket, 48390, "Failed password for invalid user admin from 203.0.113.5 port "
                             "40022 ssh2")
    time.sleep(0.5)
    again = subprocess.run([*args, "--no-follow"], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 0 and "sent 1 line(s), Beacon stored 1" in again.stderr
    assert [e.kind for e in wait_for(3)] == ["accepted", "accepted", "failed"]
    assert state.read_text().strip() != cursor
