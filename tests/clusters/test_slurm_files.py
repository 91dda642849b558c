"""The files backend: a folder of saved Slurm output goes through the same sync as live Slurm."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from apps.clusters import sync
from apps.clusters.adapters.slurm import parse
from apps.clusters.adapters.slurm.registry import slurm_client
from apps.clusters.models import Cluster, Node, Partition
from apps.core.errors import AdapterError
from apps.jobs.models import Job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
AS_SAVED = {  # recorded fixture -> the name the files backend reads
    "sacct_window.json": "sacct.json", "sacct_exitcodes.txt": "sacct_exitcodes.txt",
    "squeue.json": "squeue.json", "sinfo.json": "sinfo.json",
    "scontrol_partitions.txt": "scontrol_partitions.txt",
    "sacctmgr_assoc.txt": "sacctmgr_assoc.txt", "sshare.txt": "sshare.txt",
}


@pytest.fixture
def dumps(tmp_path: Path) -> Path:
    for recorded, saved in AS_SAVED.items():
        shutil.copy(FIXTURES / recorded, tmp_path / saved)
    return tmp_path


@pytest.fixture
def cluster(db, dumps: Path) -> Cluster:
    return Cluster.objects.create(name="devcluster", slurm_backend="files",
                                  slurm_settings={"dir": str(dumps)})


def test_a_sync_from_files_stores_every_record_with_real_exit_codes(cluster, dumps):
    result = sync.sync_cluster(cluster)
    records = json.loads((dumps / "sacct.json").read_text())["jobs"]
    assert Job.objects.filter(cluster=cluster).count() == len({r["job_id"] for r in records})
    assert result.jobs.errors == []
    failed = Job.objects.get(cluster=cluster, job_id=5)  # JSON says SUCCESS/0; it exited 3
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 3, 0)


def test_unchanged_files_cost_nothing_the_second_time(cluster, settings):
    settings.SLURM_SYNC_SETTLE = 0
    sync.sync_cluster(cluster)
    assert sync.sync_cluster(cluster).unchanged


def test_nodes_partitions_queue_and_shares_come_from_their_files(cluster):
    sync.sync_cluster(cluster)
    sync.sync_nodes(cluster)
    queue = sync.sync_queue(cluster)
    sync.sync_shares(cluster)
    assert Node.objects.filter(cluster=cluster).count() == 4
    assert set(Partition.objects.filter(cluster=cluster).values_list("name", flat=True)) == {
        "gpu", "debug"}
    assert queue.gpus_opened > 0  # running jobs' GPU indices from squeue's gres_detail


def test_held_and_dependent_jobs_only_the_queue_knows_come_from_sacct_by_id(cluster, dumps):
    """A window drops jobs without an eligible time; the queue sync reads them by id, here
    from ``sacct_by_id.json`` (recorded ``sacct -a --json -j``)."""
    sync.sync_cluster(cluster)
    assert not Job.objects.filter(cluster=cluster, job_id__in=[13, 16]).exists()
    sync.sync_queue(cluster)
    assert not Job.objects.filter(cluster=cluster, job_id__in=[13, 16]).exists()  # no file

    shutil.copy(FIXTURES / "sacct_by_id.json", dumps / "sacct_by_id.json")
    sync.sync_queue(cluster)
    rows = dict(Job.objects.filter(cluster=cluster, job_id__in=[13, 16])
                .values_list("job_id", "reason"))
    assert rows == {13: "Dependency", 16: "JobHeldUser"}
    assert Job.objects.get(cluster=cluster, job_id=13).eligible_time is None


def test_saved_scripts_are_keyed_by_the_display_ids_of_the_current_files(dumps):
    (dumps / "scripts").mkdir()
    for job_id in (4, 5, 25):
        (dumps / "scripts" / f"{job_id}.sh").write_text(f"#!/bin/bash\n# job {job_id}\n")
    files = slurm_client("files", {"dir": str(dumps)})
    assert sorted(files.job_scripts([4, 5, 25])) == ["4_2", "4_5", "5"]
    # the map is read once per version of sacct.json: a new dump is read again
    doc = json.loads((dumps / "sacct.json").read_text())
    doc["jobs"] = [j for j in doc["jobs"] if j["job_id"] != 25]
    (dumps / "sacct.json").write_text(json.dumps(doc) + "\n\n")
    assert sorted(files.job_scripts([4, 5, 25])) == ["25", "4_5", "5"]


def test_saved_scripts_may_be_kept_as_sacct_prints_them(dumps):
    """``sacct --batch-script -j 5 > scripts/5.sh`` (header and dashes) reads as the bare
    script, like the cli backend's; a saved ``NONE`` is no script."""
    (dumps / "scripts").mkdir()
    recorded = (FIXTURES / "sacct_batch_script.txt").read_text()
    five = recorded[:recorded.index("Batch Script for 19+0")]
    (dumps / "scripts" / "5.sh").write_text(five)
    (dumps / "scripts" / "21.sh").write_text("Batch Script for 21\n" + "-" * 80 + "\nNONE\n\n")
    scripts = slurm_client("files", {"dir": str(dumps)}).job_scripts([5, 21])
    assert scripts == {"5": parse.parse_batch_scripts(recorded)["5"]}
    assert scripts["5"].startswith("#!/bin/sh\n# This script was created by sbatch --wrap.")


def test_a_missing_folder_or_file_is_a_clear_error(tmp_path):
    with pytest.raises(AdapterError, match="needs"):
        slurm_client("files", {})
    client = slurm_client("files", {"dir": str(tmp_path)})
    with pytest.raises(AdapterError, match=r"sinfo\.json: missing"):
        client.nodes()
    (tmp_path / "squeue.json").write_text("{not json")
    with pytest.raises(AdapterError, match=r"squeue\.json: not JSON"):
        client.queue()
