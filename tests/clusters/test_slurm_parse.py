"""The Slurm parsers on recorded real output (tests/fixtures/slurm), plus broken input."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm import ExitStatus, RecordError, SlurmJob, parse, parse_gpus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
META = json.dumps(json.loads((FIXTURES / "sacct_window.json").read_text())["meta"])


def _jobs(name: str) -> list[SlurmJob | RecordError]:
    with open(FIXTURES / name, "rb") as f:
        return list(parse.iter_sacct_json(f))


def _by_id(items: list[SlurmJob | RecordError]) -> dict[int, SlurmJob]:
    return {j.job_id: j for j in items if isinstance(j, SlurmJob)}


@pytest.fixture(scope="module")
def window() -> dict[int, SlurmJob]:
    items = _jobs("sacct_window.json")
    assert not [i for i in items if isinstance(i, RecordError)]
    return _by_id(items)


# --- sacct --json on the recorded window ----------------------------------------------


def test_it_parses_every_record_of_the_window(window):
    raw = json.loads((FIXTURES / "sacct_window.json").read_text())["jobs"]
    assert sorted(window) == sorted(r["job_id"] for r in raw)


@pytest.mark.parametrize(("job_id", "display", "state"), [
    (5, "5", "FAILED"), (6, "6", "FAILED"), (3, "3", "TIMEOUT"), (7, "7", "CANCELLED"),
    (22, "22", "OUT_OF_MEMORY"), (2, "2", "RUNNING"), (1, "1", "PENDING"),
    (29, "29", "REQUEUED"), (4, "4_5", "COMPLETED"), (23, "4_0", "COMPLETED"),
    (31, "28_0", "RUNNING"), (19, "19+0", "COMPLETED"), (20, "19+1", "COMPLETED"),
])
def test_it_reads_ids_and_states(window, job_id, display, state):
    assert (window[job_id].display_id, window[job_id].state) == (display, state)


@pytest.mark.parametrize(("job_id", "gpus", "types", "nodes", "node_count"), [
    (17, 32, {"a100": 16, "h100": 16}, "gpu[01-04]", 4),   # multi-node, two GPU models
    (2, 16, {"a100": 16}, "gpu[03-04]", 2),
    (9, 2, {"a100": 2}, "gpu03", 1),
    (1, 0, {}, "", 0),            # pending: requested 8 GPUs, allocated none
    (7, 0, {}, "", 0),            # cancelled while pending
    (33, 0, {}, "gpu03", 1),      # no GPU asked
])
def test_it_counts_allocated_gpus_only(window, job_id, gpus, types, nodes, node_count):
    job = window[job_id]
    assert (job.gpus, dict(job.gpu_types), job.nodes, job.node_count) == (
        gpus, types, nodes, node_count)


def test_it_keeps_array_and_het_fields(window):
    assert (window[4].array_job_id, window[4].array_task_id) == (4, 5)
    assert (window[19].het_job_id, window[19].het_job_offset) == (19, 0)
    assert window[5].array_job_id is None and window[5].het_job_id is None


@pytest.mark.parametrize(("job_id", "exit_status", "unresolved"), [
    (6, ExitStatus(0, 9), False),      # SIGNALED is right in the JSON
    (22, ExitStatus(0, 125), False),   # OUT_OF_MEMORY
    (9, ExitStatus(0, 0), False),      # COMPLETED
    (5, None, True),                   # exited 3, JSON says SUCCESS/0
    (33, None, True),                  # exited 1, JSON says SUCCESS/0
    (3, None, True),                   # TIMEOUT: ask another source
    (2, None, False),                  # running: no exit yet
])
def test_it_distrusts_success_for_failed_jobs(window, job_id, exit_status, unresolved):
    assert (window[job_id].exit, window[job_id].exit_unresolved) == (exit_status, unresolved)


def test_resolved_exits_agree_with_text_sacct(window):
    text = parse.parse_exit_codes((FIXTURES / "sacct_exitcodes.txt").read_text())
    resolved = {i: j.exit for i, j in window.items() if j.exit is not None}
    assert resolved and all(text[i] == e for i, e in resolved.items())


def test_it_reads_times_and_limits(window):
    job = window[5]
    assert job.submit_time.tzinfo is UTC
    assert job.submit_time <= job.start_time <= job.end_time
    assert job.time_limit_min == 5
    assert window[2].end_time is None  # running: sacct's end is 0
    assert window[1].start_time is None
    assert window[5].last_change == job.end_time


def test_it_keeps_pending_reasons_only_while_pending(window):
    raw = {r["job_id"]: r for r in json.loads((FIXTURES / "sacct_window.json").read_text())["jobs"]}
    assert raw[11]["state"]["reason"] == "AssocGrpGRES"  # stale: job 11 is running
    assert window[11].reason == ""
    assert window[12].reason == ""  # sacct says "None"; the queue sync fills live reasons


def test_it_stores_hostile_text_verbatim(window):
    assert window[30].name.startswith("<img src=x onerror=alert(1)>")
    assert window[30].comment == "'; DROP TABLE jobs; -- <b>bold</b>"


def test_it_reads_the_tres_it_counts(window):
    assert parse.parse_tres_string(window[17].tres_alloc)["gres/gpu"] == 32


# --- what the window misses: sacct -j ------------------------------------------------


def test_it_reads_the_recorded_memory_peaks(window):
    # MaxRSS in bytes: 4,161,536 for job 17's python; sleep jobs about 230 KB
    assert window[17].mem_peak_mb == pytest.approx(3.969, abs=0.001)
    assert window[3].mem_peak_mb == pytest.approx(0.223, abs=0.001)
    # a step killed before the accounting gathered anything records 0: not a measured peak
    assert window[22].mem_peak_mb is None and window[5].mem_peak_mb is None


def test_the_memory_peak_is_the_largest_maxrss_of_the_steps():
    raw = json.loads((FIXTURES / "sacct_window.json").read_text())["jobs"]
    record = next(r for r in raw if r["job_id"] == 22)  # OUT_OF_MEMORY: its batch step
    record["steps"].append(json.loads(json.dumps(record["steps"][0])))  # and a second one
    for step, peak in zip(record["steps"], (50 * 2**20, 96 * 2**20), strict=True):
        for item in step["tres"]["requested"]["max"]:
            if item["type"] == "mem":
                item["count"] = peak
    job = parse.parse_sacct_job(record)
    assert job.mem_peak_mb == 96.0
    assert job.memory_mb == 100  # the request, for the page's "peak of request"


def test_it_reads_the_pending_remainder_of_an_array():
    jobs = [j for j in _jobs("sacct_by_id.json") if isinstance(j, SlurmJob)]
    remainder = next(j for j in jobs if j.job_id == 28)
    assert remainder.display_id == "28_[2-9]"
    assert remainder.array_tasks_pending == "2-9"
    assert remainder.array_task_id is None and remainder.state == "PENDING"


def test_a_requeued_job_appears_twice_with_a_later_submit():
    twins = [j for j in _jobs("sacct_by_id.json") if isinstance(j, SlurmJob) and j.job_id == 29]
    assert [j.state for j in twins] == ["REQUEUED", "PENDING"]
    assert twins[1].submit_time > twins[0].submit_time


# --- broken and hostile input -------------------------------------------------------


def _stream(jobs: list[object]) -> io.BytesIO:
    return io.BytesIO(json.dumps({"meta": json.loads(META), "errors": [], "jobs": jobs}).encode())


def _good_record() -> dict:
    raw = json.loads((FIXTURES / "sacct_window.json").read_text())["jobs"]
    return next(r for r in raw if r["job_id"] == 5)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda r: r.pop("job_id"), "missing field 'job_id'"),
    (lambda r: r.update(job_id="abc"), "expected a number"),
    (lambda r: r.update(job_id=-4), "bad job_id"),
    (lambda r: r.pop("time"), "missing field 'time'"),
    (lambda r: r["time"].update(submission=0), "no submission time"),
    (lambda r: r.update(state=None), "state is not an object"),
    (lambda r: r.update(name=12), "expected a string"),
    (lambda r: r.update(nodes="gpu[01-"), "bad host list 'gpu[01-': '[' at 3 is never closed"),
    (lambda r: r["tres"]["allocated"].append({"type": "gres", "name": "gpu", "count": "8"}),
     "expected a number"),
])
def test_a_malformed_record_is_reported_by_index_and_the_rest_kept(mutate, message):
    bad = _good_record()
    mutate(bad)
    items = list(parse.iter_sacct_json(_stream([_good_record(), bad, _good_record()])))
    assert [type(i).__name__ for i in items] == ["SlurmJob", "RecordError", "SlurmJob"]
    error = items[1]
    assert error.index == 1 and message in error.message
    assert str(error).startswith("record #1")


def test_the_error_names_the_job_when_it_has_an_id():
    bad = _good_record()
    bad["time"]["submission"] = None
    (_, error) = list(parse.iter_sacct_json(_stream([_good_record(), bad])))
    assert error.job_id == 5 and "job 5" in str(error)


def test_truncated_json_keeps_what_came_before_and_says_where_it_broke():
    data = (FIXTURES / "sacct_window.json").read_bytes()
    items = list(parse.iter_sacct_json(io.BytesIO(data[: len(data) // 2])))
    *good, last = items
    assert good and all(isinstance(i, SlurmJob) for i in good)
    assert isinstance(last, RecordError) and last.job_id is None
    assert "invalid JSON after record" in last.message and last.index == len(good)


@pytest.mark.parametrize("data", [b"", b"not json", b"<html>502 Bad Gateway</html>"])
def test_garbage_is_one_error_before_any_record(data):
    (error,) = list(parse.iter_sacct_json(io.BytesIO(data)))
    assert isinstance(error, RecordError) and "before any record" in error.message


def test_nul_bytes_are_dropped_and_huge_names_kept():
    rec = _good_record()
    rec["name"] = "a\x00b" + "x" * 100_000
    (job,) = list(parse.iter_sacct_json(_stream([rec])))
    assert job.name.startswith("ab") and len(job.name) == 100_002


def test_it_streams_instead_of_reading_the_whole_file():
    rec = json.dumps(_good_record()).encode()
    body = b'{"meta":' + META.encode() + b',"errors":[],"jobs":[' + b",".join([rec] * 8000) + b"]}"

    class Counting(io.BytesIO):
        consumed = 0

        def read(self, size: int | None = -1) -> bytes:
            chunk = super().read(size)
            self.consumed += len(chunk)
            return chunk

        def read1(self, size: int = -1) -> bytes:
            chunk = super().read1(size)
            self.consumed += len(chunk)
            return chunk

    assert len(body) > 10 << 20
    stream = Counting(body)
    first = next(parse.iter_sacct_json(stream))
    assert isinstance(first, SlurmJob)
    assert 0 < stream.consumed < len(body) / 10


class _Trickle(io.RawIOBase):
    """A pipe that hands over ``size`` bytes per read, as sacct's stdout may."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at = data, size, 0

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        chunk = self.data[self.at:self.at + min(self.size, n if n > 0 else self.size)]
        self.at += len(chunk)
        return chunk

    read = read1


@pytest.mark.parametrize(("name", "size"), [("sacct_window.json", 7),
                                            ("sacct_by_id.json", 1),
                                            ("sacct_window.json", 65536)])
def test_chunk_boundaries_change_nothing(name, size):
    data = (FIXTURES / name).read_bytes()
    whole = list(parse.iter_sacct_json(io.BytesIO(data)))
    assert list(parse.iter_sacct_json(_Trickle(data, size))) == whole and len(whole) > 5


def test_the_other_top_level_members_are_handed_back_wherever_they_are():
    rec = json.dumps(_good_record())
    body = f'{{"jobs": [{rec}], "errors": [{{"error": "slurmdbd down"}}], "meta": {META}}}'
    members: dict = {}
    (job,) = list(parse.iter_sacct_json(io.BytesIO(body.encode()), members))
    assert isinstance(job, SlurmJob)
    assert members == {"jobs": 1, "errors": [{"error": "slurmdbd down"}],
                       "meta": json.loads(META)}


@pytest.mark.parametrize(("data", "message"), [
    (b"[1, 2]", "not an object"), (b'{"jobs": {"a": 1}}', "not a list"),
    (b'{"meta": ' + META.encode() + b', "jobs": [{"job_id": 1} {"job_id": 2}]}',
     "expected ']'"),
])
def test_json_of_the_wrong_shape_is_one_clear_error(data, message):
    *_, error = list(parse.iter_sacct_json(io.BytesIO(data)))  # after a record with no fields
    assert isinstance(error, RecordError) and message in error.message


def test_newer_data_parsers_wrap_numbers_and_list_states():
    rec = _good_record()
    rec["time"]["limit"] = {"set": True, "infinite": False, "number": 5}
    rec["state"]["current"] = ["FAILED"]
    (job,) = list(parse.iter_sacct_json(_stream([rec])))
    assert (job.time_limit_min, job.state) == (5, "FAILED")


# --- exit codes from text and from slurmctld ----------------------------------------


def test_it_reads_text_exit_codes_and_skips_steps_and_headers():
    codes = parse.parse_exit_codes((FIXTURES / "sacct_exitcodes.txt").read_text())
    assert codes[5] == ExitStatus(3, 0) and codes[33] == ExitStatus(1, 0)
    assert codes[6] == ExitStatus(0, 9) and codes[22] == ExitStatus(0, 125)
    by_id = parse.parse_exit_codes((FIXTURES / "sacct_exitcodes_by_id.txt").read_text())
    assert set(by_id) == {3, 5, 6, 7, 8, 29, 33}


@pytest.mark.parametrize(("raw", "expected"), [
    (768, ExitStatus(3, 0)), (256, ExitStatus(1, 0)), (9, ExitStatus(0, 9)),
    (253, ExitStatus(0, 125)), (15, ExitStatus(0, 15)), (0, ExitStatus(0, 0)),
])
def test_it_decodes_raw_wait_status(raw, expected):
    assert ExitStatus.from_wait_status(raw) == expected


def test_squeue_exit_codes_agree_with_text_sacct_for_exits():
    entries = parse.parse_squeue_json(json.loads((FIXTURES / "squeue.json").read_text()))
    text = parse.parse_exit_codes((FIXTURES / "sacct_exitcodes.txt").read_text())
    by_id = {e.job_id: e for e in entries}
    for job_id in (5, 6, 22, 33):
        assert by_id[job_id].exit == text[job_id]


def test_squeue_gives_reasons_and_estimated_starts_of_pending_jobs():
    entries = parse.parse_squeue_json(json.loads((FIXTURES / "squeue.json").read_text()))
    pending = [e for e in entries if e.state == "PENDING"]
    assert pending and all(e.reason for e in pending)
    assert {e.reason for e in pending} >= {"JobHeldUser", "Dependency"}
    assert any(e.estimated_start for e in pending)
    assert all(e.exit is None for e in pending)


# --- GPU bindings --------------------------------------------------------------------


def test_scontrol_bindings_unfold_identical_nodes():
    bindings = parse_gpus.parse_scontrol_bindings((FIXTURES / "scontrol_show_job.txt").read_text())
    job2 = sorted((b.node, b.gpu_indices, b.gpu_type) for b in bindings if b.job_id == 2)
    assert job2 == [("gpu03", tuple(range(8)), "a100"), ("gpu04", tuple(range(8)), "a100")]


def test_scontrol_and_squeue_agree_on_bindings():
    text = parse_gpus.parse_scontrol_bindings((FIXTURES / "scontrol_show_job.txt").read_text())
    live = parse_gpus.bindings_from_squeue(json.loads((FIXTURES / "squeue.json").read_text()))
    assert text and set(text) == set(live)


def test_a_malformed_host_list_loses_only_its_own_jobs_bindings():
    text = (FIXTURES / "scontrol_show_job.txt").read_text()
    broken = text.replace("Nodes=gpu[03-04] ", "Nodes=gpu[03-04 ", 1)
    assert broken != text
    good = parse_gpus.parse_scontrol_bindings(text)
    assert {b.job_id for b in good} - {2}  # other jobs hold GPUs too
    assert parse_gpus.parse_scontrol_bindings(broken) == [b for b in good if b.job_id != 2]


def test_rest_v37_and_v38_give_the_same_bindings():
    v37 = json.loads((FIXTURES / "rest" / "v0.0.37_job_2.json").read_text())
    v38 = json.loads((FIXTURES / "rest" / "v0.0.38_job_2.json").read_text())
    assert parse_gpus.bindings_from_squeue(v37) == parse_gpus.bindings_from_squeue(v38)
    assert len(parse_gpus.bindings_from_squeue(v38)) == 2


@pytest.mark.parametrize(("detail", "expected"), [
    ("gpu:h100:8(IDX:0-7)", [("h100", tuple(range(8)))]),
    ("gpu:2(IDX:1,5)", [("", (1, 5))]),
    ("gpu:a100:1(IDX:3),shard:2", [("a100", (3,))]),
    ("gpu:h100:0(IDX:N/A)", []),
    ("", []),
    # two models on one node, in one string (real 24.11.5 squeue --json, two-model job)
    ("gpu:h100:1(IDX:0),gpu:h200:2(IDX:2-3)", [("h100", (0,)), ("h200", (2, 3))]),
    ("gpu:1g.10gb:2(IDX:0,3)", [("1g.10gb", (0, 3))]),  # MIG profiles are models too
    ("gpu:(null):1(IDX:0)", [("", (0,))]),
])
def test_gres_detail(detail, expected):
    assert parse_gpus.gres_indices(detail) == expected


# --- small value parsers -------------------------------------------------------------


@pytest.mark.parametrize(("spec", "names"), [
    ("gpu01", ["gpu01"]),
    ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
    ("gpu[01,03],login1", ["gpu01", "gpu03", "login1"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
    ("gpu[01-02]-ib", ["gpu01-ib", "gpu02-ib"]),  # issue 25; the grammar: tests/analysis
    ("", []),
])
def test_hostlists(spec, names):
    assert parse.expand_hostlist(spec) == names


@pytest.mark.parametrize(("bitmap", "tasks", "ranges"), [
    ("0x38", [3, 4, 5], "3-5"), ("0x3FC", list(range(2, 10)), "2-9"), ("0x5", [0, 2], "0,2"),
])
def test_array_bitmaps(bitmap, tasks, ranges):
    assert parse.bitmap_tasks(bitmap) == tasks
    assert parse.compress_ranges(tasks) == ranges


@pytest.mark.parametrize(("spec", "expected"), [
    ("cpu=16,mem=64G,gres/gpu=8", {"cpu": 16, "mem": 65536, "gres/gpu": 8}),
    ("mem=2000M,gres/shard=4", {"mem": 2000, "gres/shard": 4}),
    ("billing=N/A,,=3", {}),
])
def test_tres_strings(spec, expected):
    assert parse.parse_tres_string(spec) == expected


@pytest.mark.parametrize(("tres", "gpus", "shards", "types"), [
    ({"gres/gpu": 8, "gres/gpu:h100": 8}, 8, 0, {"h100": 8}),
    ({"gres/gpu:h100": 2, "gres/gpu:a100": 1}, 3, 0, {"h100": 2, "a100": 1}),
    ({"gres/shard": 4}, 0, 4, {}),
    ({"gres/shard:h100": 2, "gres/gpu": 1}, 1, 2, {}),
    ({"cpu": 4}, 0, 0, {}),
])
def test_gpu_counts(tres, gpus, shards, types):
    assert parse._gpu_counts(tres) == (gpus, shards, types)


def test_epoch_zero_is_not_a_time():
    assert parse._time(0) is None and parse._time(None) is None
    assert parse._time(1796022987) == datetime(2026, 11, 30, 7, 16, 27, tzinfo=UTC)


def test_job_environments_are_keyed_by_display_id_and_none_left_out():
    envs = parse.parse_job_environments((FIXTURES / "sacct_env_vars.txt").read_text())
    assert sorted(envs) == ["21", "5"]
    assert envs["5"].startswith("SHELL=/bin/bash\nHOME=/home/grace\n")
    assert envs["5"].endswith("SLURM_GET_USER_ENV=1\n")
    assert "Environment used for" not in "".join(envs.values())
    assert parse.parse_job_environments("") == {}
    # the batch-script reader does not take environments for scripts, nor the reverse
    assert parse.parse_batch_scripts((FIXTURES / "sacct_env_vars.txt").read_text()) == {}
    none = "Batch Script for 7\n" + "-" * 80 + "\nNONE\n\n"
    assert parse.parse_batch_scripts(none) == {}


def test_batch_scripts_are_keyed_by_display_id():
    scripts = parse.parse_batch_scripts((FIXTURES / "sacct_batch_script.txt").read_text())
    assert sorted(scripts) == ["19+0", "19+1", "21", "4_0", "5"]
    assert scripts["21"].startswith("#!/bin/bash\n#SBATCH --nodes=2")
    assert "Batch Script for" not in "".join(scripts.values())
    assert parse.parse_batch_scripts("") == {}
