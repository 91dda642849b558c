"""A sliced backfill reads each slice's telemetry files in a forked child, one slice ahead
(``detection.read_ahead``): it must hand each slice exactly what reading the files there
would give, and a bad file must fail only the slices that read it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings

from apps.core.errors import AdapterError
from apps.jobs.archive_sources import catalogue_for
from apps.security import services
from apps.security.adapters import telemetry
from apps.security.detection import Sources, read_ahead
from apps.simulator import SimConfig, simulate
from tests.jobs.sim_jobs import load_cluster, load_jobs

pytestmark = pytest.mark.django_db
NOW = 1795996800  # 2026-11-30T00:00:00Z


@pytest.fixture(scope="module")
def days(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("days")
    simulate(SimConfig(nodes=2, days=3, seed=3, now=NOW, telemetry_step=3600), out)
    return out


def _slices() -> list[tuple[datetime, datetime]]:
    end = datetime.fromtimestamp(NOW, UTC)
    return services._slices(end - timedelta(days=3), end, 24)


def _direct(cluster, folder: Path, since: datetime, until: datetime):
    start = since.timestamp() - settings.SECURITY_LOOKBACK_MINUTES * 60
    paths = telemetry.telemetry_files(folder, start, until.timestamp())
    return telemetry.from_openmetrics(paths, catalogue_for(cluster), start, until.timestamp())


def test_each_slice_gets_what_reading_its_files_gives(days):
    cluster = load_cluster(days)
    folder = days / "telemetry"
    slices = _slices()
    ahead = list(read_ahead(cluster, slices, Sources(openmetrics=folder)))
    assert len(ahead) == len(slices) == 3
    for (since, until), raw in zip(slices, ahead, strict=True):
        assert raw == _direct(cluster, folder, since, until)
        assert raw.gpus  # the comparison is not of two empty reads


def test_nothing_is_read_ahead_for_one_slice_or_without_files(days):
    cluster = load_cluster(days)
    slices = _slices()
    assert list(read_ahead(cluster, slices[:1], Sources(openmetrics=days / "telemetry"))) \
        == [None]
    assert list(read_ahead(cluster, slices, Sources())) == [None, None, None]


def test_a_bad_file_fails_only_the_slices_that_read_it(days, tmp_path):
    cluster = load_cluster(days)
    load_jobs(cluster, days)
    folder = tmp_path / "telemetry"
    folder.mkdir()
    files = sorted((days / "telemetry").glob("*.om"))
    for path in files:
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / files[-1].name).write_text("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 1\n")  # truncated
    slices = _slices()
    ahead = list(read_ahead(cluster, slices, Sources(openmetrics=folder)))
    assert isinstance(ahead[-1], AdapterError) and files[-1].name in str(ahead[-1])
    assert not any(isinstance(raw, AdapterError) for raw in ahead[:-1])
    report = services.run_window(cluster, *(slices[0][0], slices[-1][1]),
                                 Sources(openmetrics=folder, script_limit=None), 24)
    skipped = [s for s in report.skipped if s.startswith("telemetry:")]
    assert len(skipped) == 1 and files[-1].name in skipped[0]
