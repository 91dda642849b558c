"""The Slurm adapter's chargeback and quota calls: sreport, sacct -X -T, sacctmgr modify.

Parsers run on recorded real output; the CLI backend runs stand-in commands that log their
arguments, environment and stdin, and print the recorded output or fail as Slurm does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm.cli import SlurmCli
from apps.clusters.adapters.slurm.rest import SlurmRest
from apps.core.errors import AdapterError, TransientAdapterError
from tests.fake import write_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
START, END = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 30, 8, tzinfo=UTC)


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- Parsers on recorded output -------------------------------------------------------------


def test_sreport_rows_are_accounts_and_users_in_gpu_minutes():
    rows = cparse.parse_sreport_usage(_read("sreport_account_user.txt"))
    accounts = {r.account: r.minutes for r in rows if not r.user}
    assert accounts == {"root": 233.0, "nlp": 196.0, "speech": 8.0, "vision": 28.0}
    assert {(r.account, r.user) for r in rows if r.user} >= {("nlp", "alice"), ("vision", "grace")}
    assert {r.tres for r in rows} == {"gres/gpu"}


def test_truncated_allocations_add_up_to_the_report_per_account():
    """The recorded sacct -T window and sreport are two renderings of one accounting."""
    jobs = cparse.parse_sacct_allocations(_read("sacct_alloc_window.txt"))
    report = {r.account: r.minutes for r in
              cparse.parse_sreport_usage(_read("sreport_account_user.txt")) if not r.user}
    assert len(jobs) == 121 and len({j.job_id for j in jobs}) == 121
    sums: dict[str, float] = {}
    for job in jobs:
        sums[job.account] = sums.get(job.account, 0.0) + job.gpus * job.elapsed_s / 60
    for account, minutes in sums.items():
        assert round(minutes) == report[account], account


def test_an_allocation_line_keeps_gpus_times_and_state():
    [job] = cparse.parse_sacct_allocations(
        "285|nlp|bob|billing=34,cpu=2,gres/gpu:h100=4,gres/gpu=4,mem=4000M,node=2|"
        "2026-11-30T08:37:16|2026-11-30T08:37:19|3|CANCELLED by 0\n")
    assert (job.job_id, job.gpus, job.elapsed_s, job.state) == (285, 4, 3, "CANCELLED")
    assert job.start == datetime(2026, 11, 30, 8, 37, 16, tzinfo=UTC)


def test_a_job_line_with_missing_fields_is_an_error_not_a_silent_skip():
    with pytest.raises(ValueError, match="fields"):
        cparse.parse_sacct_allocations("285|nlp|bob|gres/gpu=4\n")
    assert cparse.parse_sacct_allocations("sacct: warning: something\n\n") == []


@pytest.mark.parametrize(("name", "changed"), [
    ("sacctmgr_modify.txt", True), ("sacctmgr_modify_dry.txt", True),
    ("sacctmgr_modify_nothing.txt", False),
])
def test_sacctmgr_says_whether_it_changed_anything(name, changed):
    assert cparse.sacctmgr_changed(_read(name)) is changed


# --- The CLI backend ----------------------------------------------------------------------------


def _cli(tmp_path: Path, name: str, body: str) -> SlurmCli:
    log = tmp_path / "argv.log"
    write_command(tmp_path, name, f'echo "$TZ|$SLURM_TIME_FORMAT|$*" >> {log}\n'
                                  f'cat > {tmp_path}/stdin.txt\n{body}')
    return SlurmCli(cluster="devcluster", bin_dir=str(tmp_path), timeout=5)


def _logged(tmp_path: Path) -> list[str]:
    return (tmp_path / "argv.log").read_text().splitlines()


def test_the_usage_report_runs_sreport_in_utc_for_the_cluster(tmp_path):
    cli = _cli(tmp_path, "sreport", f"cat {FIXTURES / 'sreport_account_user.txt'}")
    rows = cli.usage_report(START, END, "gres/gpu")
    assert len(rows) == 12
    [line] = _logged(tmp_path)
    assert line == ("UTC|%Y-%m-%dT%H:%M:%S|-P -T gres/gpu -t minutes cluster "
                    "AccountUtilizationByUser cluster=devcluster start=2026-11-01T00:00:00 "
                    "end=2026-11-30T08:00:00")


def test_job_allocations_truncate_to_the_window_in_utc(tmp_path):
    cli = _cli(tmp_path, "sacct", f"cat {FIXTURES / 'sacct_alloc_window.txt'}")
    assert len(cli.job_allocations(START, END)) == 121
    [line] = _logged(tmp_path)
    assert line.startswith("UTC|%Y-%m-%dT%H:%M:%S|-a -X -P -n -T -M devcluster "
                           "-S 2026-11-01T00:00:00 -E 2026-11-30T08:00:00 -o JobIDRaw,")


def test_a_limit_is_written_with_exactly_the_command_shown(tmp_path):
    cli = _cli(tmp_path, "sacctmgr", f"cat {FIXTURES / 'sacctmgr_modify.txt'}")
    change = cli.set_account_limit("nlp", "gres/gpu", 6000)
    assert change.applied and change.command == (
        "sacctmgr -i modify account where name=nlp cluster=devcluster set "
        "GrpTRESMins=gres/gpu=6000")
    assert [line.split("|", 2)[2] for line in _logged(tmp_path)] == [
        change.command.removeprefix("sacctmgr ")]
    cli.set_account_limit("nlp", "gres/gpu", None)  # removing the quota is -1
    assert _logged(tmp_path)[-1].endswith("GrpTRESMins=gres/gpu=-1")


def test_a_dry_run_asks_slurm_and_answers_no(tmp_path):
    cli = _cli(tmp_path, "sacctmgr", f"cat {FIXTURES / 'sacctmgr_modify_dry.txt'}")
    change = cli.set_account_limit("nlp", "gres/gpu", 60, dry_run=True)
    assert not change.applied and "Changes Discarded" in change.output
    assert "-i" not in _logged(tmp_path)[0].split()
    assert (tmp_path / "stdin.txt").read_text() == "n\n"


def test_slurm_refusing_the_write_is_an_error_with_its_words(tmp_path):
    cli = _cli(tmp_path, "sacctmgr", f"cat {FIXTURES / 'sacctmgr_modify_nothing.txt'}; exit 1")
    with pytest.raises(AdapterError, match="Nothing modified") as err:
        cli.set_account_limit("nosuch", "gres/gpu", 60)
    assert not isinstance(err.value, TransientAdapterError)


def test_slurmdbd_down_is_transient(tmp_path):
    cli = _cli(tmp_path, "sacctmgr", "echo 'sacctmgr: error: Problem talking to the database: "
                                     "Connection refused' >&2; exit 1")
    with pytest.raises(TransientAdapterError):
        cli.set_account_limit("nlp", "gres/gpu", 60)


@pytest.mark.parametrize(("account", "tres", "minutes", "message"), [
    ("nlp set GrpTRES=cpu=1", "gres/gpu", 5, "not a Slurm account name"),
    ("", "gres/gpu", 5, "not a Slurm account name"),
    ("nlp", "gres/gpu=1,cpu", 5, "not a TRES name"),
    ("nlp", "gres/gpu", -5, "cannot be negative"),
])
def test_bad_arguments_never_reach_sacctmgr(tmp_path, account, tres, minutes, message):
    cli = _cli(tmp_path, "sacctmgr", "exit 0")
    with pytest.raises(AdapterError, match=message):
        cli.set_account_limit(account, tres, minutes)
    assert not (tmp_path / "argv.log").exists()


def test_the_account_row_is_read_live(tmp_path):
    cli = _cli(tmp_path, "sacctmgr", f"cat {FIXTURES / 'sacctmgr_assoc.txt'}")
    row = cli.account_limits("speech")
    assert row is not None and row.grp_tres_mins == {"gres/gpu": 20} and row.user == ""
    assert cli.account_limits("nosuch") is None


def test_rest_refuses_quota_writes_on_22_05_and_reports_on_every_version():
    old = SlurmRest(url="http://127.0.0.1:9", user="u", token="t", version="v0.0.38")
    new = SlurmRest(url="http://127.0.0.1:9", user="u", token="t", version="v0.0.42")
    for call in (lambda: old.set_account_limit("nlp", "gres/gpu", 5),
                 lambda: old.usage_report(START, END, "gres/gpu"),
                 lambda: old.job_allocations(START, END),
                 lambda: new.usage_report(START, END, "gres/gpu"),
                 lambda: new.job_allocations(START, END)):
        with pytest.raises(AdapterError, match="cli backend"):
            call()
