"""sync_cluster / import_sacct / setup_cluster commands and the Celery tasks.

The cluster's backend is the real CLI adapter running stand-in commands that print the
recorded output (tests/fake.py), so commands, tasks, services and parsers all run for real.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import InterfaceError, OperationalError

from apps.clusters import tasks
from apps.clusters.models import Cluster
from apps.core.errors import TransientAdapterError
from apps.core.models import TaskRun
from apps.jobs.models import Job
from tests.fake import FIXTURES, recorded_slurm_bin, write_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster.objects.create(name="devcluster", slurm_backend="cli", slurm_settings={
        "bin_dir": str(recorded_slurm_bin(tmp_path)), "timeout": 5})


def _run(*args: str, **kwargs) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **kwargs)
    return out.getvalue(), err.getvalue()


# --- import_sacct ---------------------------------------------------------------------------


def test_import_sacct_prints_a_summary(cluster):
    out, _ = _run("import_sacct", str(FIXTURES / "sacct_window.json"), cluster="devcluster",
                  exit_codes=str(FIXTURES / "sacct_exitcodes.txt"))
    assert out.startswith("devcluster: Slurm JSON v0.0.38; created 30, updated 0, skipped 0, "
                          "errors 0")
    assert Job.objects.get(job_id=5).exit_text == "3:0"


def test_import_sacct_reads_stdin(cluster, monkeypatch):
    data = (FIXTURES / "sacct_by_id.json").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    out, _ = _run("import_sacct", "-", cluster="devcluster")
    assert "created 8" in out  # 9 records, job 29 twice


def test_import_sacct_lists_errors_and_exits_1(cluster, tmp_path):
    data = (FIXTURES / "sacct_window.json").read_bytes()
    half = tmp_path / "half.json"
    half.write_bytes(data[: len(data) // 2])
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="1 record\\(s\\) rejected") as info:
        call_command("import_sacct", str(half), cluster="devcluster", stdout=out, stderr=err)
    assert info.value.returncode == 1
    assert "errors 1" in out.getvalue() and "invalid JSON after record" in err.getvalue()
    assert Job.objects.count() > 0


@pytest.mark.parametrize(("args", "message"), [
    (("nowhere.json",), "cannot read nowhere.json"),
    (("-",), "no cluster named 'other'"),
])
def test_import_sacct_refuses_clearly(cluster, args, message):
    name = "other" if args == ("-",) else "devcluster"
    with pytest.raises(CommandError, match=message):
        _run("import_sacct", *args, cluster=name)


def _dump(tmp_path: Path, order: tuple[str, ...] = ("meta", "errors", "jobs"),
          **changes) -> str:
    """The recorded window re-saved with members in ``order`` and ``changes`` applied."""
    import json

    data = {**json.loads((FIXTURES / "sacct_window.json").read_text()), **changes}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({k: data[k] for k in order if k in data}))
    return str(path)


@pytest.mark.parametrize(("changes", "order", "message"), [
    ({"errors": [{"error": "Unable to contact slurmdbd", "error_number": 1}]},
     ("meta", "errors", "jobs"), "Slurm reported errors in this dump.*Unable to contact"),
    ({"errors": [{"error": "Unable to contact slurmdbd"}]}, ("jobs", "meta", "errors"),
     "Slurm reported errors"),  # slurmrestd's order: errors after the jobs
    ({}, ("meta", "errors"), "no 'jobs' list"),
    ({"meta": {"plugin": {"type": "openapi/slurmdbd", "data_parser": "data_parser/v0.0.99"}}},
     ("meta", "errors", "jobs"), "data_parser 'data_parser/v0.0.99', which Beacon does not"),
    ({"meta": {"plugin": {"data_parser": "data_parser/v0.0.99"}}}, ("jobs", "meta"),
     "v0.0.99"),  # named only at the end
    ({"meta": {"slurm": {"release": "27.05.1"}}}, ("meta", "jobs"), "Slurm 27.05.1"),
    ({}, ("errors", "jobs"), "no 'meta'.*--data-parser"),
])
def test_import_sacct_refuses_a_dump_slurm_failed_or_beacon_cannot_read(
        cluster, tmp_path, changes, order, message):
    with pytest.raises(CommandError, match=message) as info:
        _run("import_sacct", _dump(tmp_path, order, **changes), cluster="devcluster")
    assert info.value.returncode == 1
    assert not Job.objects.exists()  # refused whole: nothing written
    run = TaskRun.objects.get(kind="slurm.import_sacct")
    assert run.status == TaskRun.Status.FAILED


def test_import_sacct_reads_meta_wherever_it_is_and_takes_a_version_for_a_dump_without(
        cluster, tmp_path):
    out, _ = _run("import_sacct", _dump(tmp_path, ("jobs", "meta", "errors")),
                  cluster="devcluster")
    assert "Slurm JSON v0.0.38; created 30" in out
    Job.objects.all().delete()
    out, _ = _run("import_sacct", _dump(tmp_path, ("errors", "jobs")), cluster="devcluster",
                  data_parser="v0.0.38")
    assert "Slurm JSON v0.0.38; created 30" in out
    with pytest.raises(CommandError, match=r"--data-parser v0\.0\.42 given, but the dump says"):
        _run("import_sacct", _dump(tmp_path), cluster="devcluster", data_parser="v0.0.42")


# --- sync_cluster ---------------------------------------------------------------------------


def test_sync_cluster_runs_every_part(cluster):
    out, _ = _run("sync_cluster", "devcluster")
    assert [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")] == [
        "devcluster jobs", "devcluster queue", "devcluster nodes", "devcluster shares",
        "devcluster limits", "devcluster labels"]
    assert Job.objects.get(job_id=5).exit_text == "3:0"
    assert Job.objects.get(job_id=21).labels["launcher"] == "torchrun"
    assert set(TaskRun.objects.values_list("kind", flat=True)) == {
        "slurm.sync_jobs", "slurm.sync_queue", "slurm.sync_nodes", "slurm.sync_shares",
        "slurm.sync_limits", "slurm.label_jobs"}
    assert list(cluster.qos_limits.values_list("name", flat=True)) == [
        "high", "normal", "beacon_fixture_qos", "low"]  # by priority
    assert list(cluster.reservations.values_list("name", flat=True)) == ["beacon_fixture"]


def test_sync_cluster_all_and_only(cluster):
    Cluster.objects.create(name="imports-only")
    out, _ = _run("sync_cluster", all=True, only="nodes")
    assert out.splitlines() == ["devcluster nodes: nodes 4, partitions 2, gone 0"]


def test_sync_cluster_reports_a_down_controller_and_exits_1(cluster):
    write_command(Path(cluster.slurm_settings["bin_dir"]), "sinfo",
                  'echo "sinfo: error: Unable to contact slurm controller" >&2; exit 1')
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command("sync_cluster", "devcluster", only="nodes", stdout=out, stderr=err)
    assert info.value.returncode == 1
    assert "devcluster nodes: FAILED: sinfo failed" in err.getvalue()
    assert TaskRun.objects.get(kind="slurm.sync_nodes").status == TaskRun.Status.FAILED


@pytest.mark.parametrize(("args", "options", "message"), [
    ((), {}, "give a cluster name or --all"),
    (("devcluster",), {"all": True}, "not both"),
    (("nope",), {}, "no cluster named 'nope'"),
    (("devcluster",), {"only": "jobs,magic"}, "unknown part"),
])
def test_sync_cluster_refuses_bad_arguments(cluster, args, options, message):
    with pytest.raises(CommandError, match=message):
        _run("sync_cluster", *args, **options)


# --- setup_cluster --------------------------------------------------------------------------


def test_setup_cluster_from_the_environment(settings, db):
    settings.SLURM_CLUSTER, settings.SLURM_BACKEND = "prod", "rest"
    settings.SLURM_REST_URL, settings.SLURM_REST_USER = "http://127.0.0.1:6820", "beacon"
    settings.SLURM_REST_TOKEN_FILE = "/run/secrets/slurm_jwt"
    settings.PROMETHEUS_URL = "http://127.0.0.1:9090"
    out, _ = _run("setup_cluster")
    assert out.startswith("cluster prod created: backend rest")
    cluster = Cluster.objects.get(name="prod")
    cluster.slurm_settings["ssh"] = "kept"
    cluster.save()
    out, _ = _run("setup_cluster")
    cluster.refresh_from_db()
    assert "updated" in out and cluster.slurm_settings["ssh"] == "kept"
    assert cluster.slurm_settings["url"] == "http://127.0.0.1:6820"
    assert cluster.prometheus_url == "http://127.0.0.1:9090"


@pytest.mark.parametrize(("cluster_name", "backend", "url", "message"), [
    ("", "cli", "", "set SLURM_CLUSTER"),
    ("prod", "rest", "", "needs SLURM_REST_URL"),
])
def test_setup_cluster_refuses_incomplete_settings(settings, db, cluster_name, backend, url,
                                                   message):
    settings.SLURM_CLUSTER, settings.SLURM_BACKEND, settings.SLURM_REST_URL = (
        cluster_name, backend, url)
    with pytest.raises(CommandError, match=message):
        _run("setup_cluster")


# --- tasks ------------------------------------------------------------------------------------


def test_tasks_retry_transient_errors_with_backoff():
    for task in (tasks.sync_cluster, tasks.sync_queue, tasks.sync_nodes, tasks.sync_shares):
        assert task.autoretry_for == (TransientAdapterError, OperationalError, InterfaceError)
        assert task.retry_backoff is True and task.max_retries == 8


def test_beat_fans_out_to_clusters_with_a_backend(cluster, django_capture_on_commit_callbacks):
    Cluster.objects.create(name="imports-only")
    Cluster.objects.create(name="demo", slurm_backend="cli", is_simulated=True)
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.sync_all_clusters.delay("nodes").get() == 1
    assert TaskRun.objects.filter(kind="slurm.sync_nodes", cluster=cluster).count() == 1


def test_every_beat_entry_names_a_part(settings):
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        if entry["task"] == "apps.clusters.tasks.sync_all_clusters":
            assert entry["args"][0] in tasks.PARTS


def test_import_sacct_labels_jobs_from_saved_scripts(cluster, tmp_path):
    from apps.clusters.adapters.slurm.parse import parse_batch_scripts

    scripts = parse_batch_scripts((FIXTURES / "sacct_batch_script.txt").read_text())
    (tmp_path / "21.sh").write_text(scripts["21"])
    (tmp_path / "5.sh").write_text(scripts["5"])
    out, _ = _run("import_sacct", str(FIXTURES / "sacct_window.json"), cluster="devcluster",
                  scripts=str(tmp_path))
    assert "labels: 1 of 30 jobs labelled" in out
    assert Job.objects.get(job_id=21).labels["pipeline_parallel"] == 2
    # a stored script with no #SBATCH --output: Slurm's default applies (stdout "")
    assert Job.objects.get(job_id=5).labels == {"rules": 2, "stdout": ""}
