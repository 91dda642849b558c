"""GPU counts where Slurm's accounting has none (issue 25).

A site whose ``AccountingStorageTRES`` does not list ``gres/gpu`` keeps no GPU count in its
job records; the importer then reads what a job asked for on its command line
(``GpuSource.SUBMIT_LINE``), and the queue sync gives started jobs what slurmctld says they
hold (``gres_detail``) or asked for (``tres_per_*``). ``gpu_requests.rank`` orders the
sources, so accounting's own count always wins where there is one.
"""

from __future__ import annotations

from django.utils import timezone

from apps.analysis.chargeback import gpu_allocation
from apps.analysis.plausibility import reasons
from apps.clusters.adapters.slurm import QueueEntry
from apps.clusters.adapters.slurm.gpu_requests import rank as gpu_rank
from apps.clusters.models import Cluster
from apps.jobs.models import Job


def apply_slurmctld_gpus(cluster: Cluster, entries: list[QueueEntry]) -> int:
    """Give started jobs the GPUs slurmctld says they hold where accounting does not count
    GPUs (no ``gres/gpu`` in ``AccountingStorageTRES``), by ``gpu_requests.rank``: accounting
    beats ``gres_detail``, which beats a request. A changed count is checked again for
    plausibility, as the importer checks records. Returns how many jobs changed."""
    live = {e.job_id: e for e in entries if e.gpus and e.state != "PENDING"}
    rows = Job.objects.filter(cluster=cluster, job_id__in=list(live)).only(*_CHECKED)
    kinds, per_shard = cluster.gpu_kinds(), cluster.shards_per_gpu()
    capacity, now = cluster.capacity(), timezone.now()
    changed = []
    for row in rows if live else []:
        entry = live[row.job_id]
        if gpu_rank(entry.gpu_source) <= gpu_rank(row.gpu_source):
            continue
        equivalent, per_model = gpu_allocation(entry.gpus, entry.gpu_types, kinds)
        row.gpus, row.gpu_types, row.gpu_source = entry.gpus, dict(per_model), entry.gpu_source
        row.gpu_equivalent = equivalent + row.gpu_shards / per_shard
        found = reasons(row, capacity, now)
        if found != row.implausible:  # acceptance was for the reasons it had
            row.implausible, row.implausible_accepted_at = found, None
            row.implausible_accepted_by = None
        changed.append(row)
    Job.objects.bulk_update(changed, ["gpus", "gpu_types", "gpu_source", "gpu_equivalent",
                                      "implausible", "implausible_accepted_at",
                                      "implausible_accepted_by"], batch_size=500)
    return len(changed)


# what the check reads, loaded at once (a deferred field would cost a query per job)
_CHECKED = ("pk", "job_id", "gpus", "gpu_shards", "gpu_types", "gpu_source", "gpu_equivalent",
            "cpus", "node_count", "memory_mb", "submit_time", "eligible_time", "start_time",
            "end_time", "time_limit_min", "implausible", "implausible_accepted_at",
            "implausible_accepted_by")
