"""The Kineto reader on good and bad files: every failure is an AdapterError naming the file."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from apps.analysis.phases import analyze
from apps.analysis.trace_types import Kind
from apps.core.errors import AdapterError
from apps.jobs.adapters.kineto import MIB, KinetoReader, TraceLimits, find_trace_files
from tests.trace_builder import NEW_NCCL, OLD_NCCL, Options, Step, simulate, to_chrome


def _write(path: Path, doc: object, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _doc(rank: int = 0, **options: object) -> dict:
    traces = simulate([[Step()] * 3, [Step()] * 3], Options(**options))
    return to_chrome(traces[rank])


def test_it_keeps_only_the_events_the_analysis_needs(tmp_path):
    trace = KinetoReader().read(_write(tmp_path / "a.json", _doc()))
    kinds = {e.kind for e in trace.events}
    assert kinds == {Kind.STEP, Kind.ANNOTATION, Kind.CPU_OP}
    # the aten:: op and the python_function in the file are dropped
    assert not any(e.name.startswith(("aten::", "train.py")) for e in trace.events)
    assert trace.rank == 0 and trace.distributed.world_size == 2
    assert trace.base_time_ns == 1_790_857_026_000_000_000
    assert len(trace.sha256) == 64


def test_gzip_is_detected_by_its_magic_bytes_not_its_name(tmp_path):
    plain = KinetoReader().read(_write(tmp_path / "a.json", _doc(1)))
    zipped = KinetoReader().read(_write(tmp_path / "b.json", _doc(1), gz=True))
    assert zipped.events == plain.events and zipped.rank == 1


@pytest.mark.parametrize("name", [NEW_NCCL, OLD_NCCL])
def test_it_keeps_nccl_kernels_with_the_hta_fixture_shape(tmp_path, name):
    doc = _doc(gpu=True, nccl_name=name)
    doc["deviceProperties"] = [{"id": 1, "name": "NVIDIA A100-SXM4-40GB"}]  # builder: pid 1
    doc["distributedInfo"]["nccl_version"] = "2.17.1"
    # a kernel as the HTA test trace carries it: device/stream/correlation and the
    # record_param_comms metadata Kineto copies onto it
    doc["traceEvents"].append({
        "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20, "ts": 5_000_000_100.0,
        "dur": 50.0, "args": {"External id": 31, "device": 0, "stream": 20,
                              "correlation": 4242, "registers per thread": 96,
                              "Collective name": "allreduce", "In msg nelems": 1024,
                              "Out msg nelems": 1024, "Group size": 2, "dtype": "Float"}})
    trace = KinetoReader().read(_write(tmp_path / "gpu.json", doc))
    nccl = [e for e in trace.events if e.kind is Kind.KERNEL and e.name == name]
    assert len(nccl) == 5 and any(e.collective == "allreduce" and e.correlation == 4242
                                  for e in nccl)
    # launches are kept as a correlation -> time map, not as events
    assert trace.launches and not any(e.kind is Kind.LAUNCH for e in trace.events)
    assert trace.origin.device == 1 and trace.origin.device_name == "NVIDIA A100-SXM4-40GB"
    assert trace.distributed.nccl_version == "2.17.1"


def test_on_demand_ranks_written_as_a_string_are_parsed(tmp_path):
    doc = _doc()
    doc["distributedInfo"]["pg_config"][0]["ranks"] = "[0, 1]"
    doc["distributedInfo"]["rank"] = "0"
    trace = KinetoReader().read(_write(tmp_path / "a.json", doc))
    assert trace.distributed.group_ranks == (0, 1) and trace.rank == 0


def test_metadata_after_the_events_is_still_found(tmp_path):
    doc = _doc(1)
    reordered = {"traceEvents": doc.pop("traceEvents"), **doc}
    trace = KinetoReader().read(_write(tmp_path / "a.json", reordered))
    assert trace.rank == 1 and trace.base_time_ns is not None


def test_a_trace_without_distributed_info_has_no_rank(tmp_path):
    doc = _doc()
    del doc["distributedInfo"]
    trace = KinetoReader().read(_write(tmp_path / "a.json", doc))
    assert trace.rank is None


@pytest.mark.parametrize("info", [{"rank": 3, "world_size": 2}, {"rank": "x", "world_size": 2},
                                  {"world_size": 2}, "rank 0"])
def test_an_unusable_distributed_info_is_an_error(tmp_path, info):
    doc = _doc()
    doc["distributedInfo"] = info
    with pytest.raises(AdapterError, match="unusable distributedInfo"):
        KinetoReader().read(_write(tmp_path / "a.json", doc))


def test_zero_and_negative_durations_are_tolerated(tmp_path):
    doc = _doc()
    events = doc["traceEvents"]
    events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1,
                   "tid": 5, "ts": 5_000_000_000.0, "dur": -3.0})
    events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1,
                   "tid": 5, "ts": 5_000_000_000.0, "dur": 0})
    events.append({"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1,
                   "tid": 5, "ts": "soon", "dur": 4})
    trace = KinetoReader().read(_write(tmp_path / "a.json", doc))
    assert trace.dropped == 2
    assert any("2 events with a negative duration" in n for n in trace.notes)
    assert all(e.dur >= 0 for e in trace.events)
    assert analyze([trace]).ranks  # the analysis still runs on the rest


def test_infinite_times_are_dropped_but_huge_finite_ones_refuse_the_file(tmp_path):
    """A profiler's glitch (NaN, an infinity) is skipped and counted; a finite time no
    profiler writes (1e300, past 1e16 us) makes the file unreadable (issue 27)."""
    doc = _doc()
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "x", "pid": 1,
                               "tid": 5, "ts": float("inf"), "dur": 1.0})
    assert KinetoReader().read(_write(tmp_path / "a.json", doc)).dropped == 1
    doc["traceEvents"][-1]["ts"] = 1e300
    with pytest.raises(AdapterError, match=r"a.json has a time of 1e\+300 µs"):
        KinetoReader().read(_write(tmp_path / "a.json", doc))


# --- Bad files ----------------------------------------------------------------------------


def _error(path: Path, limits: TraceLimits | None = None) -> str:
    with pytest.raises(AdapterError) as caught:
        KinetoReader(limits).read(path)
    assert str(path) in str(caught.value)  # the message names the file
    assert caught.value.service == "kineto"
    return str(caught.value)


def test_a_truncated_gzip_is_a_clear_error(tmp_path):
    data = gzip.compress(json.dumps(_doc()).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "truncated gzip" in _error(path)


def test_a_corrupt_gzip_is_a_clear_error(tmp_path):
    data = bytearray(gzip.compress(json.dumps(_doc()).encode()))
    data[-8] ^= 0xFF  # the CRC-32 in the trailer no longer matches
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(data))
    assert "corrupt gzip" in _error(path)


@pytest.mark.parametrize("content", [b'{"traceEvents": [{"ph": "X", "name": "a"',
                                     b"\x00\x01garbage", b'{"traceEvents": [1, 2,, 3]}'])
def test_invalid_or_truncated_json_is_a_clear_error(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert "not valid JSON" in _error(path)


@pytest.mark.parametrize("doc", [{"hello": "world"}, [1, 2, 3], {"traceEvents": []}])
def test_json_that_is_not_a_trace_is_a_clear_error(tmp_path, doc):
    assert "not a PyTorch profiler trace" in _error(_write(tmp_path / "x.json", doc))


def test_an_empty_file_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    assert "is empty" in _error(path)


def test_a_file_over_the_size_limit_is_refused_before_parsing(tmp_path):
    path = _write(tmp_path / "big.json", _doc())
    message = _error(path, TraceLimits(max_file_bytes=1024))
    assert "over the limit" in message


def test_a_gzip_bomb_is_refused_by_its_expansion_ratio(tmp_path):
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb") as out:
        out.write(b'{"traceEvents": [')
        for _ in range(40):
            out.write(b" " * MIB)  # 40 MiB of whitespace compresses ~1000x
        out.write(b"]}")
    assert path.stat().st_size < MIB
    assert "decompression bomb" in _error(path)


def test_decompressed_bytes_are_bounded(tmp_path):
    path = _write(tmp_path / "a.json.gz", _doc(), gz=True)
    message = _error(path, TraceLimits(max_decompressed_bytes=2000))
    assert "decompresses past the limit" in message


def test_a_folder_contributes_its_json_and_gz_files(tmp_path):
    names = ("rank0.1.pt.trace.json", "rank1.2.pt.trace.json.gz", "notes.txt", ".hidden.json")
    for name in names:
        (tmp_path / name).write_text("{}")
    (tmp_path / "sub").mkdir()
    assert [p.name for p in find_trace_files([tmp_path])] == [
        "rank0.1.pt.trace.json", "rank1.2.pt.trace.json.gz"]


def test_a_missing_path_is_an_error(tmp_path):
    with pytest.raises(AdapterError, match="does not exist"):
        find_trace_files([tmp_path / "nope"])


def test_reading_in_parallel_processes_gives_the_same_traces_and_errors(tmp_path):
    good = [_write(tmp_path / f"r{r}.json", _doc(r)) for r in (0, 1)]
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    reader = KinetoReader()
    serial = reader.read_many([*good, bad])
    parallel = reader.read_many([*good, bad], workers=2)
    assert parallel[:2] == serial[:2]
    assert isinstance(parallel[2], AdapterError) and str(parallel[2]) == str(serial[2])
    assert "bad.json" in str(parallel[2])
