"""Slurm jobs as Beacon stores them, and which GPU each job held when (the metric archive:
``archive.py`` beside this module).

Jobs are written only by the sync and the sacct importer (``apps/clusters/sync.py``),
always as an upsert on (cluster, job_id).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.accounts.models import Membership
from apps.analysis.months import archive_months


class JobQuerySet(models.QuerySet["Job"]):
    def visible_to(self, user: Any) -> JobQuerySet:
        """The one visibility rule for jobs.

        A researcher sees their own jobs; a lead also sees the jobs of the teams they
        lead (what a Slurm account coordinator sees under ``PrivateData=jobs``); a
        platform admin sees everything. Inactive and anonymous users see nothing.
        """
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
        return self.filter(Q(user=user) | Q(team_id__in=led))

    def visible_parts(self, user: Any, led: list[int]) -> list[Q] | None:
        """``visible_to(user)`` as parts whose union is the same jobs, each served by an
        index on its leading column: the user's own jobs, then each team in ``led`` (the
        teams they lead, ``lead_team_ids``). Paging reads one ordered scan per part
        (``core.paging.split_slice``); the OR of the rule itself defeats both indexes.
        None when there is nothing to split: an admin sees every job, and an inactive or
        anonymous user none."""
        if not getattr(user, "is_active", False) or not user.is_authenticated or user.is_staff:
            return None
        return [Q(user=user), *(Q(team_id=team) for team in led)]

    def countable(self) -> JobQuerySet:
        """The jobs chargeback, quotas and SLOs count: every job but the implausible records
        no admin has accepted yet (issue 25, ``apps/analysis/plausibility.py``). The one
        place this rule lives."""
        return self.filter(COUNTABLE)

    def held_back(self) -> JobQuerySet:
        """Implausible records waiting for an admin: left out of every count."""
        return self.exclude(COUNTABLE)


# A record is counted when it is plausible (no reasons) or an admin accepted it.
PLAUSIBLE = Q(implausible=[])
COUNTABLE = PLAUSIBLE | Q(implausible_accepted_at__isnull=False)


class Job(models.Model):
    """One Slurm job record (an array task or a het-job component is a job of its own).

    ``job_id`` is Slurm's raw id (``JobIDRaw``); ``display_id`` is what users type
    (``4_2`` for an array task, ``7+1`` for a het component).
    """

    class State(models.TextChoices):
        PENDING = "PENDING"
        RUNNING = "RUNNING"
        SUSPENDED = "SUSPENDED"
        COMPLETING = "COMPLETING"
        COMPLETED = "COMPLETED"
        FAILED = "FAILED"
        CANCELLED = "CANCELLED"
        TIMEOUT = "TIMEOUT"
        NODE_FAIL = "NODE_FAIL"
        PREEMPTED = "PREEMPTED"
        OUT_OF_MEMORY = "OUT_OF_MEMORY"
        BOOT_FAIL = "BOOT_FAIL"
        DEADLINE = "DEADLINE"
        REQUEUED = "REQUEUED"
        UNKNOWN = "UNKNOWN"

    ACTIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED")

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE,
                                related_name="jobs")
    job_id = models.BigIntegerField(help_text="Slurm JobIDRaw")
    display_id = models.CharField(max_length=64)
    array_job_id = models.BigIntegerField(null=True, blank=True)
    array_task_id = models.IntegerField(null=True, blank=True)
    array_tasks_pending = models.CharField(max_length=500, blank=True)
    het_job_id = models.BigIntegerField(null=True, blank=True)
    het_job_offset = models.IntegerField(null=True, blank=True)

    name = models.CharField(max_length=512, blank=True)
    user_name = models.CharField(max_length=64, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="jobs")
    account = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="jobs")
    partition = models.CharField(max_length=128, blank=True)
    qos = models.CharField(max_length=64, blank=True)
    work_dir = models.TextField(blank=True)
    comment = models.TextField(blank=True)

    state = models.CharField(max_length=32, choices=State.choices, default=State.UNKNOWN)
    reason = models.CharField(max_length=200, blank=True, help_text="Pending reason (live)")
    wait_reason = models.CharField(
        max_length=200, blank=True,
        help_text="After start: the last pending reason Slurm kept (whose wait it was)")
    estimated_start = models.DateTimeField(
        null=True, blank=True, help_text="Slurm's estimate while pending (live)")
    exit_code = models.IntegerField(null=True, blank=True)
    exit_signal = models.IntegerField(null=True, blank=True)

    submit_time = models.DateTimeField()
    eligible_time = models.DateTimeField(null=True, blank=True)
    start_time = models.DateTimeField(null=True, blank=True)
    end_time = models.DateTimeField(null=True, blank=True)
    time_limit_min = models.IntegerField(null=True, blank=True)

    nodes = models.TextField(blank=True, help_text="Slurm node list expression")
    node_count = models.IntegerField(default=0)
    cpus = models.IntegerField(default=0)
    memory_mb = models.BigIntegerField(default=0)
    mem_peak_mb = models.FloatField(
        null=True, blank=True,
        help_text="Largest task's peak resident memory over the steps (sacct MaxRSS)")
    gpus = models.IntegerField(default=0, help_text="Allocated gres/gpu (whole GPUs)")
    gpu_shards = models.IntegerField(default=0, help_text="Allocated gres/shard")
    gpu_equivalent = models.FloatField(default=0, help_text="GPUs, counting shards by fraction")
    gpu_types = models.JSONField(default=dict, blank=True, help_text='{"h100": 8}')
    tres_alloc = models.TextField(blank=True, help_text="Allocated TRES as Slurm prints them")
    gpu_source = models.CharField(
        max_length=32, blank=True,
        help_text="Where the GPU count came from: accounting (allocated TRES) or, where "
                  "accounting does not track gres/gpu, the job's request (tres_per_job, "
                  "tres_per_node, tres_per_task, gpus_per_node) or gres_detail")
    # What the job asked for (issue 26): a pending job holds nothing yet, so its page shows
    # this. From Slurm's request fields (``adapters/slurm/requested.py``); null: not said.
    req_gpus = models.IntegerField(null=True, blank=True, help_text="GPUs asked for")
    req_cpus = models.IntegerField(null=True, blank=True, help_text="CPUs asked for")
    req_memory_mb = models.BigIntegerField(
        null=True, blank=True, help_text="Memory asked for, the whole job's (MB)")
    req_nodes = models.IntegerField(null=True, blank=True, help_text="Nodes asked for")
    tres_req = models.TextField(blank=True, help_text="Requested TRES as Slurm prints them")
    # Plausibility at the door (issue 25): a record Slurm should never have produced (more
    # GPUs than the cluster has, an end before its start, times centuries away) is stored,
    # with the reasons, and kept out of chargeback and SLOs until an admin accepts it.
    implausible = models.JSONField(
        default=list, blank=True,
        help_text="Why the record looks impossible (empty: plausible)")
    implausible_accepted_at = models.DateTimeField(null=True, blank=True)
    implausible_accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+")
    labels = models.JSONField(default=dict, blank=True)
    sync_hash = models.CharField(
        max_length=32, blank=True, editable=False,
        help_text="Digest of the accounting record last written: unchanged records are skipped")

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submit_time", "-id"]
        constraints = [models.UniqueConstraint(fields=["cluster", "job_id"], name="job_unique")]
        indexes = [
            # keyset pagination for "my jobs", "team jobs" and "all jobs"
            models.Index(fields=["user", "-submit_time", "-id"], name="job_user_submit"),
            models.Index(fields=["team", "-submit_time", "-id"], name="job_team_submit"),
            # one state in a scope ("my running jobs", "my team's pending jobs"): rare states
            # would otherwise scan the whole scope by time (docs/joblist.md)
            models.Index(fields=["user", "state", "-submit_time", "-id"],
                         name="job_user_state_submit"),
            models.Index(fields=["team", "state", "-submit_time", "-id"],
                         name="job_team_state_submit"),
            models.Index(fields=["-submit_time", "-id"], name="job_submit"),
            # a user's jobs by Slurm name (``?user=``, the search box), whoever sees them
            models.Index(fields=["user_name", "-submit_time", "-id"], name="job_username_submit"),
            models.Index(fields=["cluster", "array_job_id"], name="job_array"),
            models.Index(fields=["cluster", "state"], name="job_state"),
            # the few flagged records (issue 25): the admins' list and count read only these
            models.Index(fields=["-submit_time", "-id"], condition=~PLAUSIBLE,
                         name="job_implausible"),
            # and on PostgreSQL a trigram index on UPPER(name) for the name search
            # (migration 0008: an extension, so not declared here)
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.display_id}"

    def archived_gpus(self) -> models.QuerySet[Any]:
        """This job's ``JobMetricSummary`` rows, read from its months' partitions only."""
        return self.metric_summaries.filter(month__in=self.archive_months)

    def archived_nodes(self) -> models.QuerySet[Any]:
        """This job's ``JobNodeMetrics`` rows, read from its months' partitions only."""
        return self.node_metrics.filter(month__in=self.archive_months)

    @property
    def archive_months(self) -> tuple[date, ...]:
        """The archive partitions this job's rows can be in (``apps/analysis/months.py``)."""
        return archive_months(self.submit_time, self.end_time)

    @property
    def is_held_back(self) -> bool:
        """Flagged implausible and not accepted: kept out of chargeback and SLOs."""
        return bool(self.implausible) and self.implausible_accepted_at is None

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES

    @property
    def queue_wait(self) -> timedelta | None:
        """Time from eligible (or submit) to start."""
        ready = self.eligible_time or self.submit_time
        if self.start_time:
            return max(self.start_time - ready, timedelta(0))
        return None

    @property
    def run_time(self) -> timedelta | None:
        if not self.start_time:
            return None
        from django.utils import timezone

        end = self.end_time or timezone.now()
        return max(end - self.start_time, timedelta(0))

    @property
    def gpu_hours(self) -> float:
        """Allocated GPU-hours, from Slurm's allocation and elapsed time."""
        run = self.run_time
        return self.gpu_equivalent * run.total_seconds() / 3600 if run else 0.0

    def gpu_hours_until(self, now: datetime) -> float:
        """Allocated GPU-hours up to ``now`` (or the job's end): Slurm's, never sampled."""
        if not self.start_time:
            return 0.0
        end = self.end_time if self.end_time and not self.is_active else now
        return self.gpu_equivalent * max((end - self.start_time).total_seconds(), 0) / 3600

    # Where a GPU count came from, when not from accounting (issue 25), in words for the page.
    GPU_SOURCE_NOTES = {
        "gres_detail": "the GPUs slurmctld gave it (gres_detail): this cluster's accounting "
                       "does not count GPUs",
        "tres_per_job": "what it asked for (--gpus, tres_per_job): accounting does not "
                        "count GPUs here",
        "tres_per_node": "what it asked for per node (--gres / --gpus-per-node): accounting "
                         "does not count GPUs here",
        "tres_per_task": "what it asked for per task (--gpus-per-task): accounting does not "
                         "count GPUs here",
        "gpus_per_node": "what it asked for per node: accounting does not count GPUs here",
        "submit_line": "read from its sbatch command line: this cluster's accounting does "
                       "not count GPUs",
    }

    @property
    def gpu_source_note(self) -> str:
        """Where the GPU count came from, when it is not accounting's own ("" then)."""
        return self.GPU_SOURCE_NOTES.get(self.gpu_source, "")

    @property
    def exit_text(self) -> str:
        """``3:0`` as sacct prints it (exit code : signal)."""
        if self.exit_code is None and self.exit_signal is None:
            return ""
        return f"{self.exit_code or 0}:{self.exit_signal or 0}"


class JobGpuQuerySet(models.QuerySet["JobGpu"]):
    def visible_to(self, user: Any) -> JobGpuQuerySet:
        return self.filter(job__in=Job.objects.visible_to(user))


class JobGpu(models.Model):
    """A GPU held by a job over an interval: binds telemetry to jobs without job labels.

    Filled from ``scontrol show job -d`` while a job runs, or from prolog mapping files.
    ``end`` is null while the job still holds the GPU.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="gpus_held")
    node = models.ForeignKey("clusters.Node", on_delete=models.CASCADE, related_name="job_gpus")
    gpu_index = models.PositiveSmallIntegerField()
    gpu_uuid = models.CharField(max_length=64, blank=True)
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)

    objects = JobGpuQuerySet.as_manager()

    class Meta:
        ordering = ["node", "gpu_index", "start"]
        constraints = [models.UniqueConstraint(fields=["job", "node", "gpu_index", "start"],
                                               name="jobgpu_unique")]
        indexes = [models.Index(fields=["node", "gpu_index", "start"], name="jobgpu_node_time")]

    def __str__(self) -> str:
        return f"{self.job} on {self.node.name}:{self.gpu_index}"
