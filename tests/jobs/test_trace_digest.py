"""Files cut into their steps as they are read (``rank_digest``): a job of many ranks is
analysed without their events in memory together, with the same answer (issue 29 item 4).

The job here is ``bench/traces_job.py``'s, small: 3 ranks replayed from the real GPU trace
``df_index_resolver`` (one body copy: 5 traced steps), rank 1's optimizer 80 ms slower.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from apps.analysis.digest_json import (
    config_from_json,
    config_to_json,
    digest_from_json,
    digest_to_json,
)
from apps.analysis.phases import analyze, report
from apps.analysis.rank_digest import RankDigest, digest
from apps.analysis.step_phases import PhaseConfig
from apps.jobs.adapters.kineto import KinetoReader, read_trace_paths
from bench.traces_job_data import STRAGGLER_MS, Job, write_job

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "traces" / "real-gpu"
TEMPLATE = REAL / "df_index_resolver" / "df_index_resolver.json.gz"
JOB = Job(world=3, copies=1, straggler=1)


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("job") / "4242"
    write_job(TEMPLATE, folder, JOB)
    return folder


def test_the_replayed_job_names_its_planted_straggler(job_dir):
    reading = read_trace_paths([job_dir], workers=2, reduce=partial(digest, config=PhaseConfig()))
    result = report(analyze(reading.traces))
    assert all(isinstance(t, RankDigest) for t in reading.traces)
    assert (result["world_size"], result["steps"]) == (3, JOB.steps - 1)
    straggler = result["straggler"]
    assert (straggler["rank"], straggler["phase"]) == (1, "optimizer")
    assert straggler["excess_ms"] == pytest.approx(STRAGGLER_MS, rel=0.02)


def test_digests_made_by_readers_give_what_the_whole_traces_give(job_dir):
    config = PhaseConfig()
    whole = read_trace_paths([job_dir], workers=1)
    cut = read_trace_paths([job_dir], workers=2, reduce=partial(digest, config=config))
    assert report(analyze(cut.traces, config)) == report(analyze(whole.traces, config))
    assert not hasattr(cut.traces[0], "events")  # what the reader hands back holds no events


def test_a_digest_cut_under_another_config_is_refused(job_dir):
    trace = KinetoReader().read(sorted(job_dir.iterdir())[0])
    other = PhaseConfig(min_excess_ms=50.0)
    with pytest.raises(ValueError, match="another PhaseConfig"):
        analyze([digest(trace, other)], PhaseConfig())
    assert analyze([digest(trace, other)], other).steps == JOB.steps - 1


def test_digests_stored_as_json_read_back_equal_and_analyse_the_same(job_dir):
    """What a group task stores (``digest_json``) is what the last task compares: the
    real GPU job's digests, through JSON text, come back equal, under an equal config."""
    config = PhaseConfig(min_excess_ms=7.0, annotation_phases={"My Loader": "data_loading"})
    cut = read_trace_paths([job_dir], reduce=partial(digest, config=config)).traces
    again = config_from_json(json.loads(json.dumps(config_to_json(config))))
    back = [digest_from_json(json.loads(json.dumps(digest_to_json(d))), again) for d in cut]
    assert again == config and back == cut
    assert all(s.gpu is not None for d in back for s in d.cut.steps)  # GPU steps kept
    assert report(analyze(back, again)) == report(analyze(cut, config))
