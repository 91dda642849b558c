"""Every recorded Slurm release through every parser (issue 25): 22.05.8 (data parser v0.0.37
and v0.0.38), 24.11.5 (v0.0.40 to v0.0.42) and 26.05.5 (v0.0.42 to v0.0.45), all recorded on
real daemons (tests/fixtures/slurm/README.md says how).

The independent source is text: what ``sacct -P`` printed for the same jobs on the same
cluster, and ``scontrol`` text for nodes and partitions. Records of one job read through
different data parser versions of one release must come out the same.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import (
    GpuSource,
    RecordError,
    SlurmJob,
    dumps,
    parse,
    parse_gpus,
    versions,
)
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm.cli import SlurmCli, dialect_of
from apps.clusters.adapters.slurm.versions import UnknownDataParser
from tests.fake import recorded_slurm_bin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
MODERN = {"24.11": ("v0.0.40", "v0.0.41", "v0.0.42"),
          "26.05": ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")}
CLI_PARSER = {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}


def _folder(release: str) -> Path:
    return FIXTURES if release == "22.05" else FIXTURES / release


def _jobs(path: Path) -> dict[int, SlurmJob]:
    """A recording read as ``import_sacct`` reads a file: its version found first (24.11+
    print ``meta`` after the jobs), then the records."""
    with path.open("rb") as stream:
        dump = dumps.inspect(stream)
        items = list(parse.iter_sacct_json(stream, parser=dump.parser))
    errors = [i for i in items if isinstance(i, RecordError)]
    assert not errors, errors
    return {j.job_id: j for j in items if isinstance(j, SlurmJob)}


def _ids(release: str) -> dict[str, int]:
    lines = (_folder(release) / "ids.txt").read_text().split()
    return {k: int(v) for k, _, v in (line.partition("=") for line in lines)}


def _text_rows(release: str) -> dict[int, list[str]]:
    """``sacct -a -X -n -P -o JobIDRaw,JobID,State,ExitCode,AllocTRES,Submit,Start,End,
    NNodes`` as recorded beside the JSON."""
    rows = {}
    for line in (_folder(release) / "sacct_text_by_id.txt").read_text().splitlines():
        fields = line.split("|")
        rows[int(fields[0])] = fields
    return rows


def _text_time(value: str) -> datetime | None:
    if value in ("", "Unknown", "None"):
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


# --- which version a document is --------------------------------------------------------


@pytest.mark.parametrize(("release", "name", "expected"), [
    ("22.05", "sacct_window.json", "v0.0.38"),
    ("22.05", "rest/dbv0.0.37_job_5.json", "v0.0.37"),
    *[(r, "sacct_window.json", CLI_PARSER[r]) for r in MODERN],
    *[(r, f"rest/db{v}_jobs.json", v) for r, vs in MODERN.items() for v in vs],
    *[(r, f"rest/{v}_jobs.json", v) for r, vs in MODERN.items() for v in vs],
])
def test_every_recording_names_a_version_beacon_reads(release, name, expected):
    meta = json.loads((_folder(release) / name).read_text())["meta"]
    assert versions.detect(meta).name == expected


@pytest.mark.parametrize(("meta", "message"), [
    ({"plugin": {"data_parser": "data_parser/v0.0.46"}}, "'data_parser/v0.0.46'"),
    ({"slurm": {"release": "27.11.0"}}, "Slurm 27.11.0"),
    ({}, "names neither a data_parser nor a Slurm release"),
    (None, "without a 'meta' object"),
])
def test_an_unknown_version_is_a_clear_error_naming_it(meta, message):
    with pytest.raises(UnknownDataParser, match=message):
        versions.detect(meta)


def test_a_stream_in_an_unknown_version_stops_at_its_meta():
    data = json.loads((FIXTURES / "24.11" / "sacct_window.json").read_text())
    data["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.46"
    body = json.dumps({"meta": data["meta"], "jobs": data["jobs"]}).encode()
    with pytest.raises(UnknownDataParser, match=r"v0\.0\.46"):
        list(parse.iter_sacct_json(io.BytesIO(body)))


@pytest.mark.parametrize(("printed", "expected"), [
    ("slurm-wlm 22.05.8", "v0.0.38"), ("slurm 21.08.8-2", "v0.0.37"),
    ("slurm-wlm 24.11.5", "v0.0.42"), ("slurm 25.11.0", "v0.0.44"),
    ("slurm-wlm 26.05.5", "v0.0.45"),
    ("slurm 26.11.0", "v0.0.45"),  # newer than Beacon knows: the newest it reads, pinned
])
def test_the_cli_pins_the_version_its_release_prints(printed, expected):
    assert dialect_of(printed).name == expected


# --- job records: JSON against text sacct ------------------------------------------------


@pytest.mark.parametrize("release", sorted(MODERN))
def test_sacct_json_agrees_with_text_sacct_field_by_field(release):
    # text sacct -j prints a requeued job's queued instance, as sacct --json -j does
    jobs = {**_jobs(_folder(release) / "sacct_window.json"),
            **_jobs(_folder(release) / "sacct_by_id.json")}
    rows = _text_rows(release)
    assert rows and set(rows) <= set(jobs)
    for job_id, (_, shown, state, exit_text, tres, submit, start, end, _n) in rows.items():
        job = jobs[job_id]
        assert (job.display_id, job.state) == (shown, state.split()[0]), job_id
        if job.is_finished:  # text prints 0:0 for a job still queued
            assert str(job.exit) == exit_text and not job.exit_unresolved, job_id
        assert job.gpus == cparse.parse_tres_string(tres).get("gres/gpu", 0), job_id
        assert (job.submit_time, job.start_time, job.end_time) == (
            _text_time(submit), _text_time(start), _text_time(end)), job_id


@pytest.mark.parametrize("release", sorted(MODERN))
def test_exit_codes_are_believed_from_v0_0_39_on(release):
    """22.05 printed SUCCESS/0 for a job that exited 3; 24.11 and 26.05 print it right,
    so no record needs another source (text sacct says the same, above)."""
    jobs = _jobs(_folder(release) / "sacct_window.json")
    ids = _ids(release)
    assert str(jobs[ids["exit3"]].exit) == "3:0" and str(jobs[ids["sigkill"]].exit) == "0:9"
    assert not any(j.exit_unresolved for j in jobs.values())


@pytest.mark.parametrize(("release", "version"),
                         [(r, v) for r, vs in MODERN.items() for v in vs])
def test_every_rest_version_gives_the_records_sacct_gives(release, version):
    """slurmdbd over REST, at each version the release serves, against ``sacct --json``
    of the same moment (the REST window was read a little later: compare the jobs that
    had ended by the first read)."""
    cli = _jobs(_folder(release) / "sacct_window.json")
    rest = _jobs(_folder(release) / "rest" / f"db{version}_jobs.json")
    ended = [i for i, j in cli.items() if j.is_finished]
    assert ended
    for job_id in ended:
        assert rest[job_id] == cli[job_id], (version, job_id)


@pytest.mark.parametrize("release", sorted(MODERN))
def test_arrays_het_jobs_and_requeues_keep_their_shape(release):
    ids = _ids(release)
    by_id = _jobs(_folder(release) / "sacct_by_id.json")
    window = _jobs(_folder(release) / "sacct_window.json")
    remainder = by_id[ids["array"]]
    assert remainder.display_id == f"{ids['array']}_[4-9]" and remainder.state == "PENDING"
    het = [j for j in window.values() if j.het_job_id == ids["het"]]
    assert sorted(j.display_id for j in het) == [f"{ids['het']}+0", f"{ids['het']}+1"]
    # the run a requeue ended is listed once with flags PENDING and REQUEUED: REQUEUED,
    # as sacct prints it; the queued instance (later submit) is PENDING
    requeued = window[ids["requeue"]]
    assert requeued.state == "REQUEUED"
    assert by_id[ids["requeue"]].state == "PENDING"
    assert by_id[ids["requeue"]].submit_time > requeued.submit_time
    cancelled = by_id[ids["cancel_pending"]]  # time.start 4294967294 (NO_VAL): no start
    assert (cancelled.state, cancelled.start_time) == ("CANCELLED", None)


@pytest.mark.parametrize("release", sorted(MODERN))
def test_a_job_on_two_gpu_models_counts_both(release):
    job = _jobs(_folder(release) / "sacct_window.json")[_ids(release)["two_models"]]
    assert (job.gpus, dict(job.gpu_types), job.gpu_source) == (
        3, {"h100": 1, "h200": 2}, GpuSource.ACCOUNTING)


# --- accounting without gres/gpu ----------------------------------------------------------


def test_without_gpu_accounting_gpus_come_from_the_request_and_say_so():
    """24.11 with no AccountingStorageTRES: no GPU in any job's TRES, but the command line
    and slurmctld's gres_detail say what each job holds, and they agree."""
    folder = FIXTURES / "24.11" / "no_gpu_accounting"
    jobs = _jobs(folder / "sacct_window.json")
    assert all(not any(k.startswith("gres/") for k in
                       cparse.parse_tres_string(j.tres_alloc)) for j in jobs.values())
    by_name = {j.name: j for j in jobs.values()}
    expected = {"nogpu-gres": 2, "nogpu-gpus": 4, "nogpu-typed": 2, "nogpu-two-models": 3,
                "nogpu-multinode": 4, "nogpu-per-task": 2}
    assert {n: by_name[n].gpus for n in expected} == expected
    assert {j.gpu_source for j in jobs.values()} == {GpuSource.SUBMIT_LINE}
    assert dict(by_name["nogpu-two-models"].gpu_types) == {"h100": 1, "h200": 2}
    live = {e.job_id: e for e in
            parse.parse_squeue_json(json.loads((folder / "squeue.json").read_text()))}
    for job in jobs.values():
        if job.job_id in live:
            assert live[job.job_id].gpus == job.gpus
            assert live[job.job_id].gpu_source == GpuSource.GRES_DETAIL


@pytest.mark.parametrize(("line", "nodes", "expected"), [
    ("sbatch --gres=gpu:2 --wrap sleep 5", 1, (2, {}, "submit_line")),
    ("sbatch --time 1 --wrap sleep 30 && true --partition gpu --gpus 4", 1,
     (4, {}, "submit_line")),  # options after --wrap's words (recorded by a REST client)
    ("sbatch --gpus-per-node h100:1 --nodes 2 --wrap x", 2, (2, {"h100": 2}, "submit_line")),
    ("sbatch --gpus-per-task 2 --ntasks 2 --wrap x", 1, (4, {}, "submit_line")),
    ("sbatch -N2 --ntasks-per-node=4 --gpus-per-task=1 job.sh", 2, (8, {}, "submit_line")),
    # Slurm gives per socket on the sockets the tasks use: 24.11.7 held 2, not 2 x 2
    ("sbatch --gpus-per-socket 2 --sockets-per-node 2 --wrap x", 1, (0, {}, "")),
    ("sbatch -G3 job.sh", 1, (3, {}, "submit_line")),
    ("srun --gres=gpu:a100:1 --pty bash", 1, (1, {"a100": 1}, "submit_line")),
    ("sbatch --gpus-per-socket 2 --wrap x", 1, (0, {}, "")),  # sockets unknown
    ("sbatch --gres=gpu:8 --wrap srun --gpus-per-task=1 python x", 1, (8, {}, "submit_line")),
    ("sbatch --wrap srun --gpus 2 python x", 1, (0, {}, "")),  # srun's, not the job's
    ("sbatch --gres=gpu:8 --gpus-per-task=1 job.sh", 1, (0, {}, "")),  # two kinds: unknown
    ("sbatch job.sh --gpus 4", 1, (0, {}, "")),  # the script's own argument
    ("sbatch --gres=tmpdisk:100 job.sh", 1, (0, {}, "")),
    ("", 1, (0, {}, "")), ("python train.py --gpus 8", 1, (0, {}, "")),
])
def test_gpus_from_the_command_line(line, nodes, expected):
    from apps.clusters.adapters.slurm.gpu_requests import gpus_from_submit_line

    assert gpus_from_submit_line(line, nodes) == expected


# --- slurmctld: the queue and GPU bindings ------------------------------------------------


def _bindings(release: str, name: str) -> dict[tuple[int, str], set[int]]:
    out: dict[tuple[int, str], set[int]] = {}
    data = json.loads((_folder(release) / name).read_text())
    for b in parse_gpus.bindings_from_squeue(data):
        out.setdefault((b.job_id, b.node), set()).update(b.gpu_indices)
    return out


@pytest.mark.parametrize(("release", "name"), [
    *[(r, "squeue.json") for r in ("22.05", *MODERN)],
    *[(r, f"rest/{v}_jobs.json") for r, vs in MODERN.items() for v in vs],
])
def test_json_bindings_equal_scontrol_text_bindings(release, name):
    """The same running jobs' GPU indices from JSON (every version's ``job_resources``)
    and from ``scontrol -d show job`` text."""
    text: dict[tuple[int, str], set[int]] = {}
    scontrol = (_folder(release) / "scontrol_show_job.txt").read_text()
    for b in parse_gpus.parse_scontrol_bindings(scontrol):
        text.setdefault((b.job_id, b.node), set()).update(b.gpu_indices)
    found = _bindings(release, name)
    # recorded seconds apart: array tasks came and went; compare the jobs both saw
    both = {job for job, _ in found} & {job for job, _ in text}
    assert len(both) >= 4
    if release != "22.05":
        assert _ids(release)["two_models"] in both
    assert {k: v for k, v in found.items() if k[0] in both} == \
        {k: v for k, v in text.items() if k[0] in both}


@pytest.mark.parametrize("release", sorted(MODERN))
def test_both_models_of_a_two_model_node_are_bound(release):
    job = _ids(release)["two_models"]
    data = json.loads((_folder(release) / "squeue.json").read_text())
    held = {(b.gpu_type, b.gpu_indices) for b in parse_gpus.bindings_from_squeue(data)
            if b.job_id == job}
    assert held == {("h100", (0,)), ("h200", (2, 3))}


@pytest.mark.parametrize(("release", "version"),
                         [(r, v) for r, vs in MODERN.items() for v in vs])
def test_slurmctld_exit_codes_and_gpus_read_at_every_version(release, version):
    entries = {e.job_id: e for e in parse.parse_squeue_json(
        json.loads((_folder(release) / "rest" / f"{version}_jobs.json").read_text()))}
    ids = _ids(release)
    assert str(entries[ids["exit3"]].exit) == "3:0"
    assert str(entries[ids["sigkill"]].exit) == "0:9"
    assert entries[ids["two_models"]].gpus == 3
    pending = entries[ids["gpus_per_job"]]  # --gpus=2, still waiting: its request
    assert (pending.gpus, pending.gpu_source) == (2, GpuSource.TRES_PER_JOB)


# --- nodes, partitions, associations, fairshare, diag --------------------------------------


@pytest.mark.parametrize(("release", "name"), [
    *[(r, "sinfo.json") for r in MODERN],
    *[(r, f"rest/{v}_nodes.json") for r, vs in MODERN.items() for v in vs],
])
def test_nodes_of_every_version_with_several_gpu_models(release, name):
    nodes = {n.name: n for n in cparse.parse_sinfo_json(
        json.loads((_folder(release) / name).read_text()))}
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"]
    two = nodes["gpu05"]
    assert (two.gpu_type, two.gpu_count, dict(two.gpu_types)) == ("h100+h200", 6,
                                                                  {"h100": 2, "h200": 4})
    assert (nodes["gpu01"].gpu_count, dict(nodes["gpu03"].gpu_types)) == (8, {"a100": 8})
    assert set(nodes["gpu04"].partitions) == {"gpu", "debug"}
    assert two.gpus_used == 3  # the two-model job holds h100 x1 and h200 x2


@pytest.mark.parametrize(("release", "version"),
                         [(r, v) for r, vs in MODERN.items() for v in vs])
def test_partitions_over_rest_match_scontrol(release, version):
    text = {p.name: p for p in cparse.parse_scontrol_partitions(
        (_folder(release) / "scontrol_partitions.txt").read_text())}
    rest = {p.name: p for p in cparse.parse_rest_partitions(
        json.loads((_folder(release) / "rest" / f"{version}_partitions.json").read_text()))}
    assert sorted(rest) == sorted(text) == ["debug", "gpu", "multi"]
    for name, part in rest.items():
        assert (part.state, part.max_time_min, part.nodes) == (
            text[name].state, text[name].max_time_min, text[name].nodes)
    # the DEFAULT flag is in v0.0.45's records (and 22.05's), not in v0.0.40-v0.0.44's
    assert rest["gpu"].is_default == (version == "v0.0.45")


@pytest.mark.parametrize(("release", "version"),
                         [(r, v) for r, vs in MODERN.items() for v in vs])
def test_associations_over_rest_match_sacctmgr(release, version):
    text = {(a.account, a.user): a for a in cparse.parse_sacctmgr_assoc(
        (_folder(release) / "sacctmgr_assoc.txt").read_text())}
    rest = {(a.account, a.user): a for a in cparse.parse_rest_associations(
        json.loads((_folder(release) / "rest" / f"db{version}_associations.json").read_text()))}
    assert rest.keys() == text.keys()
    for key, row in rest.items():
        assert (row.grp_tres, row.grp_tres_mins, row.max_tres, row.parent) == (
            text[key].grp_tres, text[key].grp_tres_mins, text[key].max_tres,
            text[key].parent), key


@pytest.mark.parametrize(("release", "version"),
                         [("24.11", "v0.0.40"), ("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
def test_fairshare_over_rest_has_sshares_rows(release, version):
    rows = cparse.parse_rest_shares(
        json.loads((_folder(release) / "rest" / f"{version}_shares.json").read_text()))
    keys = {(r.account, r.user) for r in rows}
    assert {("nlp", ""), ("nlp", "alice"), ("vision", "grace"), ("speech", "erin")} <= keys
    assert ("root", "") not in keys  # the root account's own row, skipped as for sshare
    nlp = next(r for r in rows if (r.account, r.user) == ("nlp", ""))
    assert nlp.raw_shares == 50 and nlp.fairshare is None
    assert all(r.level_fs is None or r.level_fs < 1e6 for r in rows)  # 2^64 "inf" is None


@pytest.mark.parametrize(("release", "version"),
                         [(r, v) for r, vs in MODERN.items() for v in vs])
def test_the_change_marker_reads_every_diag(release, version):
    marker = cparse.diag_marker(
        json.loads((_folder(release) / "rest" / f"{version}_diag.json").read_text()))
    assert "jobs_submitted=30" in marker and "{" not in marker


# --- the cli backend on each release's recorded commands ----------------------------------


@pytest.mark.parametrize("release", ["22.05", *MODERN])
def test_the_cli_backend_reads_each_release(tmp_path, release):
    cli = SlurmCli(cluster="devcluster", bin_dir=str(recorded_slurm_bin(tmp_path, release)),
                   timeout=5)
    jobs = list(cli.jobs_since(None))
    assert jobs and not [j for j in jobs if isinstance(j, RecordError)]
    nodes = cli.nodes()
    assert nodes and cli.queue() and cli.gpu_bindings() and cli.partitions()
    log = (tmp_path / "argv.log").read_text()
    flag = "--json" if release == "22.05" else f"--json={CLI_PARSER[release]}"
    assert f"sacct -a {flag} " in log and log.count("sacct --version") == 1
    if release != "22.05":  # one record per node, not sinfo's groups
        assert f"scontrol {flag} show nodes" in log
        assert {n.name for n in nodes} >= {"gpu05"}


@pytest.mark.parametrize("release", ["22.05", *MODERN])
def test_the_files_backend_reads_each_release(tmp_path, release):
    """Saved output of each release, as an air-gapped site copies it: sacct's meta comes
    after the jobs from 23.02 on, and sinfo groups nodes."""
    from apps.clusters.adapters.slurm.files import SlurmFiles

    here = _folder(release)
    for saved, recorded in (("sacct.json", "sacct_window.json"), ("squeue.json", "squeue.json"),
                            ("sinfo.json", "sinfo.json"),
                            ("scontrol_partitions.txt", "scontrol_partitions.txt"),
                            ("sacct_by_id.json", "sacct_by_id.json")):
        (tmp_path / saved).write_bytes((here / recorded).read_bytes())
    files = SlurmFiles(tmp_path)
    jobs = list(files.jobs_since(None))
    assert jobs and not [j for j in jobs if isinstance(j, RecordError)]
    assert all(j.exit is not None for j in jobs if isinstance(j, SlurmJob) and j.is_finished
               and release != "22.05")  # 22.05's doubtful SUCCESS needs the exit codes file
    assert files.nodes() and files.queue() and files.gpu_bindings() and files.partitions()


def test_the_rest_version_setting_offers_every_version_the_rest_backend_speaks():
    import ast

    source = (Path(__file__).resolve().parents[2] / "portal" / "settings.py").read_text()
    call = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "env_choice"
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == "SLURM_REST_VERSION")
    offered = ast.literal_eval(call.args[2])
    assert set(offered) == {""} | {p.name for p in versions.DATA_PARSERS.values() if p.rest}
