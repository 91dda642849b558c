"""The job metric archive: each job's stored GPU metrics, per GPU and per node.

Written only by ``apps/jobs/archive.py``; pages and the API read only these (docs/metrics.md).

At a year of a large site the per-GPU and per-node rows are most of the database
(docs/SCALING.md §3: ``JobMetricSummary`` 200 GB to 930 GB, ``JobNodeMetrics`` 81 GB), so on
PostgreSQL those two tables are partitioned by month (``apps/jobs/partitions.py``, issue 29)
and retention drops whole months. ``JobMetrics`` (one row per job, the figures chargeback and
SLOs read, joined one-to-one by every page) stays whole and outlives its job's series.

The partition key is ``month``: the month the job ended, or its submit month while it runs
(``apps.analysis.months.archive_month``), filled in on every insert by ``ArchiveMonthField``
(bulk inserts included). A partitioned table's primary key and unique constraints must hold
the partition key: PostgreSQL's key is ``(id, month)`` while Django keeps ``id`` as the pk
(ids still come from one sequence, so they stay unique), and the natural keys hold
``month``. Nothing has a foreign key *to* these rows (PostgreSQL would need ``month`` in it).
Queries by job read ``Job.archived_gpus()``/``archived_nodes()`` or ``for_job(job)``, which
name the job's months so PostgreSQL prunes.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, Generic, TypeVar

from django.db import models
from django.db.models import Q

from apps.analysis.health import NodeHealth
from apps.analysis.months import archive_month, archive_months
from apps.jobs.models.jobs import Job


class JobMetrics(models.Model):
    """A job's stored GPU metrics: the job-level answer and the state of its archive.

    Written only by ``apps/jobs/archive.py``. ``status`` says how far the archive got:
    ``pending`` rows exist only to carry a refresh request or the last error; ``live``
    is a snapshot of a running job; ``partial`` is a finished job whose answer came with
    Prometheus warnings (partial data): it is fetched again later, and after
    ``archive.PARTIAL_ATTEMPTS`` such answers stored final with the warnings kept;
    ``complete`` and ``no_data`` are final (no data means the job's GPUs had no series:
    nothing is shown as measured).
    Hours are Slurm's allocation split by the measured weighting.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        LIVE = "live"
        PARTIAL = "partial"
        COMPLETE = "complete"
        NO_DATA = "no_data"

    class StragglerStatus(models.TextChoices):
        FOUND = "found"
        NONE = "none", "no straggler"
        UNDETERMINED = "undetermined", "cannot be determined"
        NOT_APPLICABLE = "not_applicable", "not applicable"

    FINAL = ("complete", "no_data")
    # Statuses whose hours and split are shown and counted (live and partial: provisional)
    MEASURED = ("live", "partial", "complete")

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="metrics")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    source = models.CharField(max_length=16, blank=True, help_text="prometheus or openmetrics")
    binding = models.CharField(max_length=8, blank=True, help_text="label (hpc_job) or host")
    measure = models.CharField(max_length=24, blank=True, help_text="activity measure used")
    gpu_vendor = models.CharField(max_length=16, blank=True,
                                  help_text="nvidia, amd, or amd+nvidia: the measures' words")
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    step_s = models.FloatField(default=0, help_text="seconds per stored point")
    points = models.PositiveSmallIntegerField(default=0)
    allocated_gpu_hours = models.FloatField(default=0)
    useful_hours = models.FloatField(default=0)
    waiting_hours = models.FloatField(default=0)
    held_idle_hours = models.FloatField(default=0)
    no_process_hours = models.FloatField(default=0)
    coverage = models.FloatField(default=0, help_text="measured / allocated GPU-time")
    measured_s = models.FloatField(
        default=0, help_text="seconds the best-covered GPU's telemetry spans (a running job's "
                             "idleness is read over these: apps/jobs/idleness.py)")
    means = models.JSONField(default=dict, blank=True)
    verdict = models.TextField(blank=True)
    gpus_missing = models.JSONField(default=list, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    partial_attempts = models.PositiveSmallIntegerField(
        default=0, help_text="answers in a row for the finished job that carried warnings")
    computed_at = models.DateTimeField(null=True, blank=True)
    refresh_requested_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    useful_fraction = models.FloatField(
        null=True, blank=True, help_text="useful / allocated GPU-hours (the efficiency band)")
    # Hardware trouble during the job, for the job-success SLO (apps/slo): None = not measured
    xid_gpus = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="GPUs that reported a hardware XID during the job")
    ecc_dbe = models.IntegerField(
        null=True, blank=True, help_text="uncorrectable ECC errors over the job's GPUs")
    # The straggler verdict from telemetry (apps/analysis/stragglers.py, docs/stragglers.md)
    straggler_status = models.CharField(max_length=16, choices=StragglerStatus.choices,
                                        blank=True)
    straggler_confidence = models.CharField(max_length=8, blank=True)
    straggler_summary = models.TextField(blank=True)
    straggler_detail = models.JSONField(
        default=dict, blank=True,
        help_text='{"stragglers": [...], "waiting_gpus": [...], "reasons": [...], '
                  '"limits": [...], "evidence": [...]}')

    class Meta:
        verbose_name_plural = "job metrics"
        indexes = [models.Index(fields=["status"], name="jobmetrics_status")]

    def __str__(self) -> str:
        return f"metrics of {self.job_id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @property
    def has_data(self) -> bool:
        return self.status in self.MEASURED and bool(self.measure)

    @property
    def refreshing(self) -> bool:
        """A refresh was asked for after the last result and the last error (and recently:
        a request no worker picked up within 10 minutes stops the page polling)."""
        from django.utils import timezone

        asked = self.refresh_requested_at
        if asked is None or timezone.now() - asked > timedelta(minutes=10):
            return False
        done = [t for t in (self.computed_at, self.last_error_at) if t is not None]
        return not done or asked > max(done)


class ArchiveMonthField(models.DateField):
    """The partition key: set from the row's job on insert when the caller left it empty.

    ``pre_save`` runs for ``save()`` and for ``bulk_create`` alike, so no writer has to know.
    """

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = getattr(model_instance, self.attname)
        if value is None:
            job = model_instance.job  # type: ignore[attr-defined]
            value = archive_month(job.submit_time, job.end_time)
            setattr(model_instance, self.attname, value)
        return value


M = TypeVar("M", bound=models.Model)


class ArchiveQuerySet(models.QuerySet[M], Generic[M]):
    def for_job(self, job: Job) -> ArchiveQuerySet[M]:
        """``job``'s rows, in the months they can be in (PostgreSQL reads only those)."""
        return self.filter(job=job, month__in=archive_months(job.submit_time, job.end_time))

    def for_jobs(self, jobs: list[Job]) -> ArchiveQuerySet[M]:
        """The rows of several jobs, pruned to the months any of them can be in."""
        months: set[date] = set()
        for job in jobs:
            months.update(archive_months(job.submit_time, job.end_time))
        return self.filter(job__in=jobs, month__in=sorted(months))


class JobMetricSummary(models.Model):
    """One GPU of one job: activity statistics, the time split, and a compact series.

    ``series`` holds about 300 down-sampled points per channel (``apps/analysis/compact``):
    a few KB per GPU-job, so months of jobs stay queryable after Prometheus' retention.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metric_summaries")
    host = models.CharField(max_length=128)
    gpu_index = models.PositiveSmallIntegerField()
    gpu_uuid = models.CharField(max_length=64, blank=True)
    gpu_model = models.CharField(max_length=128, blank=True,
                                 help_text="the exporter's model label (modelName, card_model)")
    measure = models.CharField(max_length=24)
    measured_s = models.FloatField()
    mean = models.FloatField()
    p5 = models.FloatField()
    p50 = models.FloatField()
    p95 = models.FloatField()
    idle_fraction = models.FloatField()
    useful = models.FloatField()
    waiting = models.FloatField()
    held_idle = models.FloatField()
    no_process = models.FloatField()
    util_mean = models.FloatField(null=True, blank=True)
    tensor_mean = models.FloatField(null=True, blank=True)
    fb_used_mib = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    waiting_with_traffic = models.FloatField(null=True, blank=True)
    # Health and traffic (apps/analysis/health.py): None where the series was not collected
    occupancy_mean = models.FloatField(null=True, blank=True)
    fp64_mean = models.FloatField(null=True, blank=True)
    # the roofline's other pipes (docs/roofline.md): NVIDIA's FP32/FP16, AMD's vector ALU
    fp32_mean = models.FloatField(null=True, blank=True)
    fp16_mean = models.FloatField(null=True, blank=True)
    valu_mean = models.FloatField(null=True, blank=True)
    dram_mean = models.FloatField(null=True, blank=True)
    temp_mean = models.FloatField(null=True, blank=True, help_text="°C")
    temp_max = models.FloatField(null=True, blank=True, help_text="°C")
    sm_clock_busy = models.FloatField(null=True, blank=True, help_text="MHz while busy")
    thermal_share = models.FloatField(null=True, blank=True)
    power_share = models.FloatField(null=True, blank=True)
    hw_slowdown_share = models.FloatField(null=True, blank=True)
    xids = models.JSONField(default=list, blank=True, help_text="XID codes seen")
    ecc_sbe = models.IntegerField(null=True, blank=True)
    ecc_dbe = models.IntegerField(null=True, blank=True)
    nvlink_bps = models.FloatField(null=True, blank=True)
    pcie_rx_bps = models.FloatField(null=True, blank=True)
    pcie_tx_bps = models.FloatField(null=True, blank=True)
    straggler = models.BooleanField(default=False, help_text="named by the straggler verdict")
    slowdown = models.FloatField(null=True, blank=True, help_text="0.5: 50 % slower per step")
    series = models.BinaryField(blank=True, default=b"")
    month = ArchiveMonthField(help_text="partition key: the job's end month (submit month "
                                        "while it runs)")

    objects = ArchiveQuerySet.as_manager()

    class Meta:
        ordering = ["job", "host", "gpu_index"]
        constraints = [models.UniqueConstraint(fields=["job", "host", "gpu_index", "month"],
                                               name="jobmetricsummary_unique")]
        indexes = [
            # "a GPU slow across several jobs": straggler verdicts by physical GPU
            models.Index(fields=["gpu_uuid"], condition=Q(straggler=True),
                         name="jobmetricsummary_straggler"),
            models.Index(fields=["host", "gpu_index"], condition=Q(straggler=True),
                         name="jobmetricsummary_strag_host"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.host}:{self.gpu_index}"



class JobNodeMetrics(models.Model):
    """One node of one job: CPU, memory, InfiniBand, Ethernet and file-system traffic, errors.

    Node-shared: every job on the node sees the same numbers (node_exporter has no job
    label), so pages mark these charts as such. Written only by ``apps/jobs/archive.py``.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="node_metrics")
    host = models.CharField(max_length=128)
    cpu_busy = models.FloatField(null=True, blank=True,
                                 help_text="mean share of the node's CPU time not idle")
    cpu_iowait = models.FloatField(null=True, blank=True,
                                   help_text="mean share of the node's CPU time in I/O wait "
                                             "(idle with disk I/O outstanding)")
    mem_used_bytes = models.FloatField(null=True, blank=True,
                                       help_text="peak memory in use (MemTotal - MemAvailable)")
    ib_tx_bps = models.FloatField(null=True, blank=True)
    ib_rx_bps = models.FloatField(null=True, blank=True)
    ib_wait_per_s = models.FloatField(null=True, blank=True,
                                      help_text="transmit-wait ticks per second")
    ib_errors = models.FloatField(null=True, blank=True,
                                  help_text="link error recoveries and downs in the job")
    ib_rate_min_bps = models.FloatField(null=True, blank=True,
                                        help_text="slowest port's line rate")
    ib_rate_max_bps = models.FloatField(null=True, blank=True)
    net_tx_bps = models.FloatField(null=True, blank=True)
    net_rx_bps = models.FloatField(null=True, blank=True)
    fs_read_bps = models.FloatField(null=True, blank=True,
                                    help_text="network file-system bytes read per second (NFS)")
    fs_write_bps = models.FloatField(null=True, blank=True)
    series = models.BinaryField(blank=True, default=b"")
    month = ArchiveMonthField(help_text="partition key: the job's end month (submit month "
                                        "while it runs)")

    objects = ArchiveQuerySet.as_manager()

    class Meta:
        ordering = ["job", "host"]
        verbose_name_plural = "job node metrics"
        constraints = [models.UniqueConstraint(fields=["job", "host", "month"],
                                               name="jobnodemetrics_unique")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.host}"

    @property
    def ib_degraded(self) -> bool:
        """One InfiniBand port runs slower than the node's fastest (the rule in health.py)."""
        return NodeHealth(self.host, ib_rate_min_bps=self.ib_rate_min_bps,
                          ib_rate_max_bps=self.ib_rate_max_bps).ib_degraded
