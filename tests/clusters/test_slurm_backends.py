"""The Slurm backends' plumbing: commands, ssh quoting, timeouts, HTTP errors, versions.

The CLI backend runs small stand-in scripts (``bin_dir``) that print recorded output or fail
like Slurm does; the REST backend talks to a local HTTP server serving recorded responses.
Both are fakes at the adapter boundary only; the real daemons are in tests/integration.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import ExitStatus, RecordError, SlurmJob
from apps.clusters.adapters.slurm.cli import SlurmCli
from apps.clusters.adapters.slurm.registry import slurm_client
from apps.clusters.adapters.slurm.rest import SlurmRest
from apps.core.errors import AdapterError, TransientAdapterError
from tests.fake import recorded_slurm_bin, write_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


# --- CLI --------------------------------------------------------------------------------


def _bin(tmp_path: Path, name: str, body: str, release: str = "22.05.8") -> None:
    """A stand-in command; sacct also answers ``--version`` (the backend asks it once)."""
    version = f'[ "$1" = --version ] && {{ echo "slurm-wlm {release}"; exit 0; }}\n'
    write_command(tmp_path, name, version + body if name == "sacct" else body)
    if name != "sacct" and not (tmp_path / "sacct").exists():
        write_command(tmp_path, "sacct", version + "exit 1")


@pytest.fixture
def cli(tmp_path: Path) -> SlurmCli:
    """A CLI backend whose commands print the recorded fixtures and log their arguments."""
    return SlurmCli(cluster="devcluster", bin_dir=str(recorded_slurm_bin(tmp_path)), timeout=5)


def _argv_log(cli: SlurmCli) -> list[str]:
    """The commands run, without the one ``sacct --version`` that tells the release."""
    lines = (Path(cli.bin_dir) / "argv.log").read_text().splitlines()
    return [line for line in lines if line != "sacct --version"]


def test_cli_streams_sacct_with_a_relative_window(cli):
    since = datetime.now(tz=UTC) - timedelta(hours=1)
    jobs = list(cli.jobs_since(since))
    assert len(jobs) == 30 and all(isinstance(j, SlurmJob) for j in jobs)
    (line,) = _argv_log(cli)
    assert line.startswith("sacct -a --json -M devcluster -S now-36")
    assert line.endswith("seconds -E now -s PD,R,S,CD,CA,F,TO,NF,PR,BF,DL,OOM,RQ")


def test_cli_reads_ids_in_chunks(cli):
    list(cli.jobs_by_id(range(1, 451)))
    lines = _argv_log(cli)
    assert len(lines) == 3 and lines[0].endswith(",200")
    assert "-j 401,402," in lines[2] and lines[2].endswith(",450")


def test_cli_reads_every_other_source(cli):
    assert len(cli.queue()) > 0 and all(e.state in ("PENDING", "RUNNING") for e in cli.queue())
    assert cli.gpu_bindings() and cli.nodes() and cli.partitions()
    assert cli.associations() and cli.shares()
    assert "Jobs submitted=" in cli.change_marker()


def test_cli_reads_stored_scripts_and_environments(cli):
    assert sorted(cli.job_scripts([5, 19, 20, 21])) == ["19+0", "19+1", "21", "4_0", "5"]
    envs = cli.job_environments([5, 21, 22])
    assert sorted(envs) == ["21", "5"]  # 22 has none: sacct prints NONE
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1\n" in envs["21"]
    assert _argv_log(cli)[-1] == "sacct --env-vars -M devcluster -j 5,21,22"


def test_an_sacct_without_env_vars_is_a_clear_error(tmp_path):
    _bin(tmp_path, "sacct", 'echo "sacct: unrecognized option \'--env-vars\'" >&2; exit 1')
    with pytest.raises(AdapterError, match="unrecognized option"):
        SlurmCli(bin_dir=str(tmp_path), timeout=5).job_environments([5])


def test_cli_exit_codes_come_from_text_sacct(tmp_path):
    _bin(tmp_path, "sacct", f"cat {FIXTURES / 'sacct_exitcodes_by_id.txt'}")
    codes = SlurmCli(bin_dir=str(tmp_path)).exit_codes([5, 33])
    assert codes[5] == ExitStatus(3, 0) and codes[33] == ExitStatus(1, 0)


def test_a_controller_that_is_down_is_transient(tmp_path):
    _bin(tmp_path, "squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller '
         '(connect failure)" >&2; exit 1')
    with pytest.raises(TransientAdapterError, match="Unable to contact slurm controller"):
        SlurmCli(bin_dir=str(tmp_path)).queue()


def test_other_command_failures_are_permanent(tmp_path):
    _bin(tmp_path, "sinfo", 'echo "sinfo: unrecognized option --json" >&2; exit 1')
    with pytest.raises(AdapterError) as info:
        SlurmCli(bin_dir=str(tmp_path)).nodes()
    assert not isinstance(info.value, TransientAdapterError)
    assert "unrecognized option" in str(info.value)


def test_a_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(AdapterError, match="cannot run"):
        SlurmCli(bin_dir=str(tmp_path / "nowhere")).nodes()


def test_a_slow_command_times_out_as_transient(tmp_path):
    _bin(tmp_path, "sinfo", "exec sleep 5")
    with pytest.raises(TransientAdapterError, match="timed out"):
        SlurmCli(bin_dir=str(tmp_path), timeout=0.3).nodes()


def test_a_slow_sacct_stream_is_killed_and_transient(tmp_path):
    _bin(tmp_path, "sacct", "printf '{\"jobs\": ['; exec sleep 5")
    with pytest.raises(TransientAdapterError, match="timed out"):
        list(SlurmCli(bin_dir=str(tmp_path), timeout=0.3).jobs_since(None))


def test_a_failing_sacct_wins_over_its_broken_json(tmp_path):
    _bin(tmp_path, "sacct", "printf '{\"jobs\": [{\"job_id\": 1'; "
         "echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1")
    with pytest.raises(TransientAdapterError, match="Problem talking to the database"):
        list(SlurmCli(bin_dir=str(tmp_path)).jobs_since(None))


def test_broken_json_from_a_successful_sacct_is_a_record_error(tmp_path):
    data = (FIXTURES / "sacct_window.json").read_bytes()
    (tmp_path / "half.json").write_bytes(data[: len(data) // 2])
    _bin(tmp_path, "sacct", f"cat {tmp_path / 'half.json'}")
    *good, last = list(SlurmCli(bin_dir=str(tmp_path)).jobs_since(None))
    assert good and isinstance(last, RecordError) and "invalid JSON" in last.message


def test_ssh_quotes_the_remote_command():
    cli = SlurmCli(ssh="beacon@login01", ssh_options=("-p", "2222"), timeout=7)
    argv = cli._argv(["sacct", "-j", "1;rm -rf /", "-o", "JobIDRaw,ExitCode"])
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=7"]
    assert argv[5:9] == ["-p", "2222", "beacon@login01", "--"]
    assert shlex.split(argv[9]) == ["sacct", "-j", "1;rm -rf /", "-o", "JobIDRaw,ExitCode"]


def test_ssh_failures_are_transient(tmp_path):
    _bin(tmp_path, "ssh", 'echo "ssh: connect to host login01 port 22: No route" >&2; exit 255')
    cli = SlurmCli(ssh="login01")
    cli_argv = cli._argv
    cli._argv = lambda cmd, env=(): [str(tmp_path / "ssh"), *cli_argv(cmd, env)[1:]]  # type: ignore[method-assign]
    with pytest.raises(TransientAdapterError):
        cli.nodes()


# --- REST -------------------------------------------------------------------------------

ROUTES: dict[str, tuple[int, bytes]] = {}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        status, body = ROUTES.get(path, (404, b'{"errors": [{"error": "no route"}]}'))
        if self.headers.get("X-SLURM-USER-TOKEN") != "good-token":
            status, body = 401, b"Authentication failure"
        ROUTES["__last_query__"] = (0, self.path.encode())
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _route(path: str, fixture: str, status: int = 200) -> None:
    ROUTES[path] = (status, (FIXTURES / fixture).read_bytes())


def _rest(url: str, version: str = "v0.0.38", token: str = "good-token") -> SlurmRest:
    return SlurmRest(url=url, user="beacon", token=token, version=version, timeout=5,
                     cluster="devcluster")


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.37"])
def test_rest_reads_jobs_and_exit_codes_per_version(server, version):
    _route(f"/slurmdb/{version}/jobs", f"rest/db{version}_job_5.json")
    _route(f"/slurm/{version}/jobs", f"rest/{version}_job_5.json")
    rest = _rest(server, version)
    (job,) = list(rest.jobs_by_id([5]))
    assert job.state == "FAILED" and job.exit_unresolved  # the 22.05 bug, in both versions
    query = ROUTES["__last_query__"][1].decode()
    assert "step=5" in query and "skip_steps" not in query and "cluster=devcluster" in query
    assert rest.exit_codes([5]) == {5: ExitStatus(3, 0)}


@pytest.mark.parametrize("job_id", [5, 6])
def test_both_versions_give_the_same_finished_job(server, job_id):
    """dbv0.0.37 reports the eligible time as start (5: 1796022987, the real start is
    1796023038, as dbv0.0.38 and sacct say): rebuilt from end - elapsed."""
    records = {}
    for version in ("v0.0.38", "v0.0.37"):
        _route(f"/slurmdb/{version}/jobs", f"rest/db{version}_job_{job_id}.json")
        (records[version],) = list(_rest(server, version).jobs_by_id([job_id]))
    assert records["v0.0.37"] == records["v0.0.38"]
    assert records["v0.0.37"].start_time != records["v0.0.37"].eligible_time


def test_a_v37_job_cancelled_before_it_started_starts_when_it_ended(server):
    body = json.loads((FIXTURES / "rest/dbv0.0.37_job_6.json").read_text())
    job = body["jobs"][0]
    job["state"]["current"] = "CANCELLED"
    job["time"].update(eligible=0, start=0, elapsed=0, end=job["time"]["submission"] + 5)
    ROUTES["/slurmdb/v0.0.37/jobs"] = (200, json.dumps(body).encode())
    (parsed,) = list(_rest(server, "v0.0.37").jobs_by_id([job["job_id"]]))
    assert parsed.start_time == parsed.end_time is not None  # what sacct prints


def test_rest_windows_are_relative_and_urlencoded(server):
    _route("/slurmdb/v0.0.38/jobs", "rest/dbv0.0.38_job_6.json")
    list(_rest(server).jobs_since(datetime.now(tz=UTC) - timedelta(minutes=2)))
    query = ROUTES["__last_query__"][1].decode()
    assert "start_time=now-12" in query and "end_time=now" in query
    assert "state=pending%2Crunning%2C" in query


def test_rest_reads_live_state(server):
    _route("/slurm/v0.0.38/jobs", "squeue.json")
    _route("/slurm/v0.0.38/nodes", "rest/v0.0.38_nodes.json")
    _route("/slurm/v0.0.38/partitions", "rest/v0.0.38_partitions.json")
    _route("/slurm/v0.0.38/diag", "rest/v0.0.38_diag.json")
    _route("/slurmdb/v0.0.38/associations", "rest/dbv0.0.38_associations.json")
    rest = _rest(server)
    assert rest.queue() and rest.gpu_bindings() and len(rest.nodes()) == 4
    assert len(rest.partitions()) == 2 and rest.associations()
    assert "jobs_submitted" in rest.change_marker()
    with pytest.raises(AdapterError, match="sshare"):
        rest.shares()


def test_a_bad_token_is_a_permanent_error(server):
    _route("/slurm/v0.0.38/nodes", "rest/v0.0.38_nodes.json")
    with pytest.raises(AdapterError, match="refused the token") as info:
        _rest(server, token="stale").nodes()
    assert not isinstance(info.value, TransientAdapterError)


def test_a_500_is_transient_and_errors_in_a_200_too(server):
    ROUTES["/slurm/v0.0.38/nodes"] = (500, b'{"errors": [{"error": "Unable to contact"}]}')
    with pytest.raises(TransientAdapterError, match="HTTP 500"):
        _rest(server).nodes()
    ROUTES["/slurm/v0.0.38/nodes"] = (200, json.dumps(
        {"errors": [{"error": "slurmctld down"}], "nodes": []}).encode())
    with pytest.raises(TransientAdapterError, match="slurmctld down"):
        _rest(server).nodes()


@pytest.mark.parametrize("errors_first", [True, False])
def test_jobs_in_a_200_with_errors_fail_the_read(server, errors_first):
    body = json.loads((FIXTURES / "rest/dbv0.0.38_job_6.json").read_text())
    errors = [{"error": "Unable to connect to database", "errno": 1}]
    members = {"meta": body["meta"], "errors": errors, "jobs": body["jobs"]}
    if not errors_first:  # jobs, then the errors slurmrestd met reading more of them
        members = {"meta": body["meta"], "jobs": body["jobs"], "errors": errors}
    ROUTES["/slurmdb/v0.0.38/jobs"] = (200, json.dumps(members).encode())
    read: list = []
    with pytest.raises(TransientAdapterError, match="Unable to connect to database"):
        read.extend(_rest(server).jobs_since(None))
    assert len(read) == (0 if errors_first else len(body["jobs"]))


def test_an_unparsable_query_is_permanent(server):
    ROUTES["/slurm/v0.0.38/nodes"] = (500, b'{"errors": [{"description": "Unable to parse"}]}')
    with pytest.raises(AdapterError) as info:
        _rest(server).nodes()
    assert not isinstance(info.value, TransientAdapterError)


def test_a_closed_port_is_transient():
    with pytest.raises(TransientAdapterError, match="unreachable"):
        SlurmRest(url="http://127.0.0.1:9", user="u", token="t", timeout=2).nodes()


def test_unknown_versions_and_missing_options_are_refused(tmp_path):
    with pytest.raises(AdapterError, match=r"v0\.0\.99.*which Beacon does not read"):
        SlurmRest(url="http://x", user="u", token="t", version="v0.0.99")
    with pytest.raises(AdapterError, match=r"'v0\.0\.36'.*does not read"):  # 22.05 serves it
        SlurmRest(url="http://x", user="u", token="t", version="v0.0.36")
    with pytest.raises(AdapterError, match="needs a url"):
        slurm_client("rest", {})
    with pytest.raises(AdapterError, match="token"):
        slurm_client("rest", {"url": "http://x"})
    token = tmp_path / "jwt"
    token.write_text("SLURM_JWT=abc\n")
    client = slurm_client("rest", {"url": "http://x", "user": "u", "token_file": str(token)})
    assert isinstance(client, SlurmRest) and client.token == "abc"


# --- registry and pyslurm ---------------------------------------------------------------


def test_the_registry_builds_backends_by_name():
    assert isinstance(slurm_client("cli", {"cluster": "c", "timeout": 3}), SlurmCli)
    with pytest.raises(AdapterError, match="unknown Slurm backend"):
        slurm_client("magic", {})


def test_pyslurm_is_imported_only_when_selected_and_fails_clearly():
    import sys

    assert "pyslurm" not in sys.modules  # nothing above imported it
    with pytest.raises(AdapterError, match="needs the pyslurm package"):
        slurm_client("pyslurm", {})
    # the backend itself, against a stand-in pyslurm 25.11: tests/clusters/test_slurm_pyslurm.py


NOTHING_FOUND = {"meta": {"plugin": {"type": "openapi/dbv0.0.38"}, "Slurm": {
    "release": "22.05.8"}}, "errors": [{"description": "Nothing found", "error_number": 9003,
                                        "error": "Nothing found with query",
                                        "source": "slurmdb_jobs_get"}], "jobs": []}


def test_an_id_accounting_does_not_have_is_an_empty_answer_not_a_failure(tmp_path):
    """22.05's sacct --json -j <unknown id> says "Nothing found" in its errors (recorded on
    the dev cluster); a job Beacon holds as active that accounting lost must not fail every
    sync. A real failure in the same list still does."""
    _bin(tmp_path, "sacct", f"echo '{json.dumps(NOTHING_FOUND)}'")
    assert list(SlurmCli(bin_dir=str(tmp_path), timeout=5).jobs_by_id([999999])) == []
    broken = {**NOTHING_FOUND, "errors": [*NOTHING_FOUND["errors"], {
        "description": "Unable to contact slurmdbd", "error_number": 1}]}
    _bin(tmp_path, "sacct", f"echo '{json.dumps(broken)}'")
    with pytest.raises(TransientAdapterError, match="Unable to contact slurmdbd"):
        list(SlurmCli(bin_dir=str(tmp_path), timeout=5).jobs_by_id([999999]))
