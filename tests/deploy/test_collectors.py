"""The node-side collectors of deploy/collectors/, run as a node runs them: as programs,
against a live Beacon (pytest-django's live server), with a PATH of stub binaries that
print what the real tools print (tests/fixtures/collectors/README.md says which outputs
were recorded). What they post must land in the ingest tables and reach the rules."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User

from apps.accounts import tokens
from apps.clusters.models import Cluster
from apps.security.defaults import seed
from apps.security.detection import Sources, detect
from apps.security.models import (
    AllowListEntry,
    Finding,
    NodeInventory,
    SshAllowedSource,
    SshLogEvent,
)
from tests.conftest import make_job

ROOT = Path(__file__).resolve().parents[2]
COLLECTORS = ROOT / "deploy" / "collectors"
JOURNAL = ROOT / "tests" / "fixtures" / "collectors" / "journalctl_sshd.json"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def stub(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(body if body.startswith("#!") else "#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def printing(text: str) -> str:
    """A stub body printing ``text`` with the shell's own printf (the PATH has no cat)."""
    return f"printf '%s\\n' {shlex.quote(text)}\n"


@pytest.fixture
def beacon(live_server: Any, tmp_path: Path) -> dict[str, Any]:
    """A cluster, a collector account with an API token, the seeded rules, the config."""
    seed(apps)  # a transactional test may run after another one emptied the tables
    cluster = Cluster.objects.create(name="devcluster", display_name="Dev")
    account = User.objects.create_user("collector", is_staff=True)
    token = tmp_path / "collector.token"
    token.write_text(tokens.create(account, "collector")[1] + "\n")
    conf = tmp_path / "collector.conf"
    conf.write_text(f"# as /etc/beacon/collector.conf\nBEACON_URL={live_server.url}\n"
                    f"BEACON_CLUSTER=devcluster\nBEACON_TOKEN_FILE={token}\n")
    return {"cluster": cluster, "conf": conf, "url": live_server.url, "token": token}


def run(script: str, args: list[str], env: dict[str, str], stdin: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(COLLECTORS / script), *args], env=env,
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)


def load(script: str) -> Any:
    spec = importlib.util.spec_from_file_location(script[:-3], COLLECTORS / script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- The node inventory ---------------------------------------------------------------------------


def node_tools(tmp_path: Path, with_dpkg: bool = False) -> dict[str, str]:
    """A PATH of the node's tools (outputs as recorded or shaped: see the fixtures' README),
    and a module system whose ml/2024.1 brings a python3 with torch 2.5.1+cu121."""
    bin_ = tmp_path / "bin"
    stub(bin_, "sinfo", printing("slurm-wlm 22.05.8"))
    stub(bin_, "munged", printing("munge-0.5.15 (2022-06-22)"))
    stub(bin_, "nvidia-ctk", printing("NVIDIA Container Toolkit CLI version 1.17.7\n"
                                      "commit: 6cd8fe6b0d4a8f76b6a8a0e0e4c1e6a8a1e2f3b4"))
    stub(bin_, "nvidia-smi", printing("\n".join(["550.54.15"] * 8)))
    if with_dpkg:  # dpkg owns munged (a Debian backport), nothing else
        stub(bin_, "dpkg-query", """case "$1 $2" in
  "-S "*/munged) echo "munge: /usr/sbin/munged" ;;
  "-W -f=\\${Version}") [ "$3" = munge ] && printf '0.5.15-2+deb12u1' || exit 1 ;;
  *) echo "dpkg-query: no path found matching pattern $2" >&2; exit 1 ;;
esac
""")
    stub(tmp_path / "modules" / "ml-2024.1" / "bin", "python3", "printf '2.5.1+cu121'\n")
    init = tmp_path / "lmod-init.sh"
    init.write_text(f"""module() {{
  [ "$1" = load ] || return 1
  case "$2" in
    ml/2024.1) PATH="{tmp_path}/modules/ml-2024.1/bin:$PATH"; export PATH ;;
    *) echo "Lmod has detected the following error: unknown module $2" >&2; return 1 ;;
  esac
}}
""")
    return {"PATH": str(bin_), "HOME": str(tmp_path), "BEACON_MODULE_INIT": str(init)}


def test_the_inventory_script_posts_what_the_node_runs_and_the_rule_sees_it(beacon, tmp_path):
    env = {**node_tools(tmp_path), "BEACON_COLLECTOR_CONFIG": str(beacon["conf"])}
    done = run("beacon_inventory.py", ["--node", "gpu07", "--module", "ml/2024.1",
                                       "--module", "ml/missing", "--output", "-"], env)
    assert done.returncode == 0, done.stderr
    assert "module ml/missing: no torch version" in done.stderr
    row = NodeInventory.objects.get(cluster=beacon["cluster"], node="gpu07")
    expected = {"slurm": "22.05.8", "munge": "0.5.15", "nvidia_container_toolkit": "1.17.7",
                "nvidia_driver": "550.54.15", "pytorch:ml/2024.1": "2.5.1+cu121"}
    assert row.software == expected
    assert json.loads(done.stdout)["software"] == expected  # what it printed is what it sent
    assert abs((row.collected_at - datetime.now(UTC)).total_seconds()) < 600
    now = datetime.now(UTC)
    detect(beacon["cluster"], now - timedelta(minutes=10), now, Sources())
    found = {(f.evidence["software"], f.evidence["version"]): f
             for f in Finding.objects.filter(rule_key="vulnerable_software")}
    assert set(found) == {("slurm", "22.05.8"), ("munge", "0.5.15"),
                          ("nvidia_container_toolkit", "1.17.7"), ("pytorch", "2.5.1+cu121")}
    assert found[("pytorch", "2.5.1+cu121")].evidence["provided_by"] == ["ml/2024.1"]
    assert found[("nvidia_container_toolkit", "1.17.7")].evidence["cves"] == ["CVE-2025-23266"]


def test_a_package_managers_backport_version_is_sent_and_can_be_allow_listed(beacon, tmp_path):
    env = {**node_tools(tmp_path, with_dpkg=True), "BEACON_COLLECTOR_CONFIG": str(beacon["conf"])}
    assert run("beacon_inventory.py", ["--node", "gpu08"], env).returncode == 0
    software = NodeInventory.objects.get(node="gpu08").software
    assert software["munge"] == "0.5.15-2+deb12u1" and software["slurm"] == "22.05.8"
    AllowListEntry.objects.create(kind="version", value="munge=0.5.15-2+deb12u1",
                                  reason="Debian's DSA backports the fix")
    now = datetime.now(UTC)
    detect(beacon["cluster"], now - timedelta(minutes=10), now, Sources())
    assert not Finding.objects.filter(rule_key="vulnerable_software",
                                      evidence__software="munge").exists()
    assert Finding.objects.filter(rule_key="vulnerable_software",
                                  evidence__software="slurm").exists()


@pytest.mark.parametrize(("change", "message"), [
    ("token", "Beacon answered 401"),
    ("cluster", "Beacon answered 404"),
    ("url", "cannot reach Beacon"),
])
def test_the_inventory_script_fails_loudly(beacon, tmp_path, change, message):
    env = {**node_tools(tmp_path), "BEACON_COLLECTOR_CONFIG": str(beacon["conf"])}
    bad = tmp_path / "bad.token"
    bad.write_text("not-a-token\n")
    args = {"token": ["--token-file", str(bad)],
            "cluster": ["--cluster", "nosuchcluster"],
            "url": ["--url", "http://127.0.0.1:9"]}[change]
    done = run("beacon_inventory.py", ["--node", "gpu07", "--timeout", "5", *args], env)
    assert done.returncode == 2 and message in done.stderr
    assert not NodeInventory.objects.exists()


def test_the_inventory_script_needs_its_settings(tmp_path):
    env = {"PATH": "/nonexistent", "BEACON_COLLECTOR_CONFIG": str(tmp_path / "none.conf")}
    done = run("beacon_inventory.py", [], env)
    assert done.returncode == 1 and "BEACON_URL" in done.stderr


# --- Forwarding sshd's lines ---------------------------------------------------------------------

STUB_JOURNALCTL = f"""#!{sys.executable}
# journalctl, as far as the forwarder uses it: -t filters, --after-cursor, --since now,
# over the recorded entries; logs its arguments.
import json, sys
args = sys.argv[1:]
with open(sys.argv[0] + ".calls", "a") as log:
    log.write(json.dumps(args) + "\\n")
entries = [json.loads(line) for line in open({str(JOURNAL)!r})]
idents = [args[i + 1] for i, a in enumerate(args) if a == "-t"]
if "--after-cursor" in args:
    cursors = [e["__CURSOR"] for e in entries]
    entries = entries[cursors.index(args[args.index("--after-cursor") + 1]) + 1:]
elif "--since" in args and args[args.index("--since") + 1] == "now":
    entries = []
for entry in entries:
    if not idents or entry.get("SYSLOG_IDENTIFIER") in idents:
        print(json.dumps(entry))
"""
EVENTS_AT = datetime.fromtimestamp(1796308480, UTC)  # the recording: 2026-12-03 14:34:40 UTC


def sshd_world(cluster: Cluster) -> None:
    """bob has a job on gpu04 at the time; mallory has none; login nodes are 10.20.0.0/24."""
    make_job(cluster, 501, None, None, user_name="bob", nodes="gpu04",
             submit_time=EVENTS_AT - timedelta(hours=1), start_time=EVENTS_AT - timedelta(
                 minutes=50), end_time=EVENTS_AT + timedelta(hours=1))
    SshAllowedSource.objects.create(name="login nodes", network="10.20.0.0/24")


def detect_ssh(cluster: Cluster) -> dict[str, set[str]]:
    detect(cluster, EVENTS_AT - timedelta(minutes=30), EVENTS_AT + timedelta(minutes=30),
           Sources())
    out: dict[str, set[str]] = {}
    for f in Finding.objects.filter(rule_key__startswith="ssh_"):
        out.setdefault(f.rule_key, set()).add(f"{f.user_name}@{f.node_name}")
    return out


def test_the_journal_forwarder_sends_sshd_entries_once_and_the_ssh_rules_see_them(beacon,
                                                                                  tmp_path):
    journalctl = stub(tmp_path / "bin", "journalctl", STUB_JOURNALCTL)
    state = tmp_path / "cursor"
    env = {"PATH": f"{journalctl.parent}:/usr/bin:/bin",
           "BEACON_COLLECTOR_CONFIG": str(beacon["conf"])}
    args = ["--journal", "--no-follow", "--state", str(state), "--every", "0.2"]
    first = run("beacon_sshd_forward.py", [*args, "--journal-arg=--since=2026-12-03"], env)
    assert first.returncode == 0, first.stderr
    assert "sent 6 line(s), Beacon stored 5" in first.stderr  # a disconnect is no event
    assert SshLogEvent.objects.count() == 5
    assert {(e.kind, e.user_name, e.host) for e in SshLogEvent.objects.all()} == {
        ("accepted", "mallory", "gpu04"), ("accepted", "bob", "gpu04"),
        ("denied", "", "gpu04"), ("closed_preauth", "eve", "gpu04"),
        ("failed", "admin", "gpu04")}
    last_sshd = [json.loads(line) for line in JOURNAL.read_text().splitlines()][-2]
    assert state.read_text().strip() == last_sshd["__CURSOR"]
    again = run("beacon_sshd_forward.py", args, env)
    assert again.returncode == 0 and "sent 0 line(s)" in again.stderr
    calls = [json.loads(line) for line in Path(f"{journalctl}.calls").read_text().splitlines()]
    assert calls[1][calls[1].index("--after-cursor") + 1] == last_sshd["__CURSOR"]
    assert calls[0].count("-t") == 2 and "sshd-session" in calls[0]
    sshd_world(beacon["cluster"])
    assert detect_ssh(beacon["cluster"]) == {"ssh_without_allocation": {"mallory@gpu04"},
                                             "ssh_unexpected_source": {"mallory@gpu04"}}


AUTH_LOG = "".join(line + "\n" for line in (
    "Dec  3 14:34:40 gpu04 sshd[48211]: Accepted publickey for mallory from 10.9.9.9 port 50412"
    " ssh2: ED25519 SHA256:Qm9ndXM",
    "Dec  3 14:34:40 gpu04 CRON[48400]: pam_unix(cron:session): session opened for user root("
    "uid=0) by (uid=0)",
    "2026-12-03T14:34:41.329688+00:00 gpu04 sshd-session[48377]: Accepted publickey for bob from"
    " 10.20.0.9 port 51000 ssh2",
    "2026-12-03T15:34:42.000000+01:00 gpu04 sshd[48230]: pam_slurm_adopt[48230]: Access denied by"
    " pam_slurm_adopt: you have no active jobs on this node",
    "Dec  3 14:34:43 gpu04 systemd[1]: Started session-12.scope - Session 12 of User bob.",
))


def test_the_stdin_forwarder_takes_rsyslog_and_auth_log_lines(beacon, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "BEACON_COLLECTOR_CONFIG": str(beacon["conf"])}
    done = run("beacon_sshd_forward.py", ["--every", "0.2"], env, stdin=AUTH_LOG)
    assert done.returncode == 0, done.stderr
    assert "sent 3 line(s), Beacon stored 3" in done.stderr  # CRON and systemd dropped
    # RFC 3339 lines keep their instant; a classic line's year comes from the ingest's now
    stored = {e.user_name: e.at for e in SshLogEvent.objects.all()}
    assert stored["bob"] == datetime(2026, 12, 3, 14, 34, 41, 329688, tzinfo=UTC)
    assert SshLogEvent.objects.filter(kind="denied", at=datetime(2026, 12, 3, 14, 34, 42,
                                                                 tzinfo=UTC)).exists()


def test_the_forwarder_keeps_lines_while_beacon_is_down_and_says_so(tmp_path):
    token = tmp_path / "token"
    token.write_text("x")
    env = {"PATH": "/usr/bin:/bin", "BEACON_COLLECTOR_CONFIG": str(tmp_path / "none.conf")}
    done = run("beacon_sshd_forward.py", ["--url", "http://127.0.0.1:9", "--cluster", "c",
                                          "--token-file", str(token), "--every", "0.1",
                                          "--timeout", "2"], env, stdin=AUTH_LOG)
    assert done.returncode == 2
    assert "cannot reach Beacon" in done.stderr and "3 unsent" in done.stderr


def test_the_forwarders_pure_parts():
    forward = load("beacon_sshd_forward.py")
    entry = json.loads(JOURNAL.read_text().splitlines()[2])
    assert forward.journal_line(entry) == (
        "2026-12-03T14:34:40.279786+00:00 gpu04 sshd[48211]: Accepted publickey for mallory "
        "from 10.9.9.9 port 50412 ssh2: ED25519 SHA256:Qm9ndXMgZmluZ2VycHJpbnQgZm9yIGEgdGVzdCBrZXk")
    raw = {**entry, "MESSAGE": list(b"Accepted password for b\xffb from 10.0.0.1 port 1 ssh2")}
    assert "for b\ufffdb from" in forward.journal_line(raw)
    assert forward.journal_line({**entry, "SYSLOG_IDENTIFIER": "CRON"}) is None
    assert forward.journal_line({**entry, "__REALTIME_TIMESTAMP": "soon"}) is None
    sender = forward.Sender("http://127.0.0.1:9", "t", "c", max_buffer=3, timeout=1)
    for i in range(5):
        sender.add(f"line {i}")
    assert [line for line, _ in sender.pending] == ["line 2", "line 3", "line 4"]
    assert sender.dropped == 2
    with pytest.raises(ValueError, match="https"):
        forward.Sender("file:///etc/passwd", "t", "c", 3, 1)
    assert forward.journal_command(None, True, [])[-3:] == ["--since", "now", "-f"]
    assert "--after-cursor" in forward.journal_command("s=1", False, [])


def test_the_inventory_scripts_pure_parts():
    inventory = load("beacon_inventory.py")
    assert [inventory.first_version(text) for text in (
        "slurm-wlm 22.05.8", "munge-0.5.15 (2022-06-22)",
        "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d",
        "2.5.1+cu121", "550.54.15\n550.54.15\n", "no version", "")] == \
        ["22.05.8", "0.5.15", "1.17.8", "2.5.1+cu121", "550.54.15", None, None]
    doc = inventory.document("gpu01", {"slurm": "22.05.8"},
                             datetime(2026, 12, 3, 14, 0, 0, 123, tzinfo=UTC))
    assert doc == {"node": "gpu01", "collected_at": "2026-12-03T14:00:00+00:00",
                   "software": {"slurm": "22.05.8"}}


def test_the_shipped_units_and_rsyslog_snippet_call_the_scripts():
    for name in ("beacon-inventory.service", "beacon-inventory.timer",
                 "beacon-sshd-forward.service", "60-beacon-sshd.conf"):
        assert (COLLECTORS / name).is_file(), name
    assert "beacon-sshd-forward" in (COLLECTORS / "60-beacon-sshd.conf").read_text()
    assert "--journal" in (COLLECTORS / "beacon-sshd-forward.service").read_text()
    for script in ("beacon_inventory.py", "beacon_sshd_forward.py"):
        assert os.access(COLLECTORS / script, os.X_OK), script
