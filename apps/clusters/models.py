"""A cluster, its nodes and partitions, and which Slurm account belongs to which team."""

from __future__ import annotations

import re
import zoneinfo
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from apps.analysis.chargeback import ChargebackError, GpuKind, gpu_kinds
from apps.analysis.plausibility import Capacity
from apps.core.checks import url_problem
from apps.core.models import TimeStampedModel

STALE_AFTER = timedelta(minutes=10)  # pages warn when Slurm data is older than this


class ClusterQuerySet(models.QuerySet["Cluster"]):
    def visible_to(self, user: Any) -> ClusterQuerySet:
        """Cluster names and states are not secret: every signed-in user sees them."""
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        return self.all()

    def fed_by_slurm(self) -> ClusterQuerySet:
        """Clusters whose job records come from a live Slurm sync: the ones list pages
        report the freshness of (simulated clusters are a fixed snapshot)."""
        return self.exclude(slurm_backend=Cluster.SlurmBackend.NONE).filter(is_simulated=False)


def _validate_timezone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"{value!r} is not an IANA time zone (e.g. Europe/Paris)") from None


def _validate_service_url(value: str) -> None:
    problem = url_problem(value)
    if problem:
        raise ValidationError(f"{value!r} {problem}")


_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")  # an RFC 9110 token


def _validate_headers(value: Any) -> None:
    """Extra query headers: header names to printable one-line values (a Mimir tenant)."""
    if not isinstance(value, dict):
        raise ValidationError('Headers must be an object, e.g. {"X-Scope-OrgID": "tenant-a"}')
    for name, text in value.items():
        if not _HEADER_NAME.fullmatch(str(name)):
            raise ValidationError(f"{name!r} is not an HTTP header name")
        if not isinstance(text, str) or not text.isprintable():
            raise ValidationError(f"header {name}: the value must be one line of text")


def _validate_gpu_types(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise ValidationError('GPU types must be a list of objects, e.g. [{"name": "h100"}]')
    try:
        gpu_kinds(value)
    except ChargebackError as exc:
        raise ValidationError(str(exc)) from None


class Cluster(TimeStampedModel):
    """One Slurm cluster and the Prometheus that watches it.

    The sync fields implement the claim (only one worker syncs a cluster at a time) and
    the watermark (the last change time already read from Slurm).
    """

    class SlurmBackend(models.TextChoices):
        NONE = "none", "None (imports only)"
        CLI = "cli", "CLI JSON (sacct/squeue/sinfo --json)"
        REST = "rest", "slurmrestd (JWT)"
        PYSLURM = "pyslurm", "pyslurm (Slurm 25.11 only)"
        FILES = "files", "Saved command output in a folder (air-gapped sites, demo)"

    class SyncState(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"

    name = models.SlugField(max_length=64, unique=True, help_text="Slurm ClusterName")
    display_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    is_simulated = models.BooleanField(
        default=False, help_text="Data comes from Beacon's simulator, not a real cluster")
    simulated_now = models.DateTimeField(
        null=True, blank=True,
        help_text='A simulated cluster\'s "now": where its saved Slurm output and telemetry '
                  "end (load_demo sets it); live passes over it (guardrails) run at this time")
    slurm_backend = models.CharField(max_length=16, choices=SlurmBackend.choices,
                                     default=SlurmBackend.NONE)
    slurm_settings = models.JSONField(
        default=dict, blank=True,
        help_text='Backend options, e.g. {"ssh": "login01", "timeout": 30} or '
                  '{"url": "http://127.0.0.1:6820", "user": "beacon", "token_file": "..."}')
    prometheus_url = models.CharField(max_length=500, blank=True,
                                      validators=[_validate_service_url])
    prometheus_headers = models.JSONField(
        default=dict, blank=True, validators=[_validate_headers],
        help_text='Extra HTTP headers on every query, e.g. {"X-Scope-OrgID": "tenant-a"} '
                  'for a multi-tenant Mimir (docs/metrics.md, "Stores")')
    metric_labels = models.JSONField(
        default=dict, blank=True,
        help_text='Label names where they differ: {"hostname": "Hostname", "job": "hpc_job"}')
    timezone = models.CharField(max_length=64, default="UTC", validators=[_validate_timezone])
    gpu_types = models.JSONField(
        default=list, blank=True, validators=[_validate_gpu_types],
        help_text='[{"name": "h100", "model": "NVIDIA H100 80GB HBM3", "shards_per_gpu": 1}, '
                  '{"name": "1g.10gb", "parent": "h100", "fraction": "1/7"}]: a MIG type '
                  'is charged as "fraction" of its "parent" GPU model (docs/chargeback.md)')
    sync_state = models.CharField(max_length=16, choices=SyncState.choices,
                                  default=SyncState.IDLE)
    sync_claimed_at = models.DateTimeField(null=True, blank=True)
    sync_watermark = models.DateTimeField(
        null=True, blank=True, help_text="Last Slurm change time already synced")
    sync_marker = models.CharField(
        max_length=500, blank=True,
        help_text="Scheduler job counters (sdiag) at the last sync: unchanged = nothing new")
    sync_marker_at = models.DateTimeField(null=True, blank=True,
                                          help_text="When sync_marker last changed")
    last_full_sync_at = models.DateTimeField(
        null=True, blank=True, help_text="Start of the last sync that read accounting")
    last_sync_ok_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    queue_synced_at = models.DateTimeField(null=True, blank=True,
                                           help_text="Pending reasons, estimated starts, GPUs")
    nodes_synced_at = models.DateTimeField(null=True, blank=True)
    shares_synced_at = models.DateTimeField(null=True, blank=True)
    limits_synced_at = models.DateTimeField(
        null=True, blank=True, help_text="Reservations and QOS limits last read")
    limits_notes = models.JSONField(
        default=dict, blank=True,
        help_text='Why a part was not read: {"reservations": "...", "qos": "..."}')

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name

    @property
    def title(self) -> str:
        return self.display_name or self.name

    @property
    def metrics_url(self) -> str:
        """The Prometheus this cluster's live metrics come from: its own, else the site's
        ``PROMETHEUS_URL``; "" when there is none (pages then show the stored archive and
        queue no refresh that could only fail, issue 19)."""
        return self.prometheus_url or settings.PROMETHEUS_URL

    @property
    def has_telemetry(self) -> bool:
        """Whether any store answers for this cluster: its own or the site's Prometheus, or
        a ``TelemetryStore`` for some of its nodes."""
        return bool(self.metrics_url) or self.telemetry_stores.exists()

    @property
    def is_stale(self) -> bool:
        """Slurm data is stale when the last job sync failed or is older than STALE_AFTER.

        A simulated cluster never is (issue 26): its Slurm is the simulator's saved month,
        read once by ``load_demo``, and nothing newer exists to sync; the pages say
        "simulated" instead."""
        if self.slurm_backend == self.SlurmBackend.NONE or self.is_simulated:
            return False
        if self.last_sync_error or self.last_sync_ok_at is None:
            return True
        return timezone.now() - self.last_sync_ok_at > STALE_AFTER

    def gpu_kinds(self) -> dict[str, GpuKind]:
        """The cluster's own MIG fractions and parent models, by Slurm GPU type name."""
        return gpu_kinds(self.gpu_types or [])

    def capacity(self) -> Capacity:
        """What the cluster has, from its synced nodes, for the plausibility check: GPUs as
        devices (as Slurm's gres counts them, a MIG slice is one), nodes; None when no
        node reports them (the check then uses bounds above any cluster)."""
        rows = list(self.nodes.values_list("gpu_count", "gpu_types"))
        gpus = sum(max(count, sum(n for n in (types or {}).values() if isinstance(n, int)))
                   for count, types in rows)
        return Capacity(gpus=gpus or None, nodes=len(rows) or None,
                        shards_per_gpu=self.shards_per_gpu())

    def shards_per_gpu(self, gpu_type: str = "") -> int:
        """How many ``gres/shard`` make one GPU, from the cluster's GPU type list."""
        for entry in self.gpu_types or []:
            if not gpu_type or entry.get("name") == gpu_type:
                return max(1, int(entry.get("shards_per_gpu", 1)))
        return 1


def _validate_names(value: Any) -> None:
    """A list of non-empty one-line names or globs, e.g. ["gpu-a*", "login01"]."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() and
                                              v.isprintable() for v in value):
        raise ValidationError('Give a list of names, e.g. ["gpu-a*", "gpu-b0[1-4]"]')


class TelemetryStore(TimeStampedModel):
    """One more Prometheus-compatible store answering for part of a cluster's nodes
    (issue 29: sites shard scraping per node group).

    A node belongs to the first store (by ``order``, then name) whose host globs or
    partitions claim it; nodes no store claims stay with the cluster's own Prometheus URL
    (the default store). Routing is ``apps/analysis/stores.py``; the fan-out over stores,
    and what a store that is down leaves not checked, ``apps/clusters/stores.py``.
    """

    class Kind(models.TextChoices):
        PROMETHEUS = "prometheus", "Prometheus (or Thanos/Mimir query endpoint)"
        VICTORIAMETRICS = "victoriametrics", "VictoriaMetrics"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE,
                                related_name="telemetry_stores")
    name = models.SlugField(max_length=64, help_text="Short name the pages and runs use")
    url = models.CharField(max_length=500, validators=[_validate_service_url])
    headers = models.JSONField(default=dict, blank=True, validators=[_validate_headers],
                               help_text='Extra HTTP headers, e.g. {"X-Scope-OrgID": "t1"}')
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PROMETHEUS,
                            help_text="The query engine (docs/metrics.md, \"Stores\")")
    hosts = models.JSONField(default=list, blank=True, validators=[_validate_names],
                             help_text='Host-name globs, e.g. ["gpu-a*", "gpu-b0[1-4]"]')
    partitions = models.JSONField(default=list, blank=True, validators=[_validate_names],
                                  help_text='Slurm partitions, e.g. ["inference"]')
    order = models.PositiveSmallIntegerField(default=0, help_text="Lower claims first")

    class Meta:
        ordering = ["cluster", "order", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="telemetry_store_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    def clean(self) -> None:
        if not self.hosts and not self.partitions:
            raise ValidationError("A store must claim some nodes: give host globs or "
                                  "partitions")
        if self.name == "default":
            raise ValidationError({"name": '"default" stands for the Prometheus URL of the '
                                           'cluster itself'})


class Partition(TimeStampedModel):
    """A Slurm partition, synced from sinfo/scontrol."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=128)
    is_default = models.BooleanField(default=False)
    max_time_min = models.IntegerField(null=True, blank=True)
    state = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="partition_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class Node(TimeStampedModel):
    """A compute node and its GPUs, synced from sinfo."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=128)
    partitions = models.ManyToManyField(Partition, blank=True, related_name="nodes")
    gpu_type = models.CharField(max_length=64, blank=True)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_types = models.JSONField(
        default=dict, blank=True,
        help_text='GPUs per model, e.g. {"h100": 2, "h200": 4} (a node may hold several)')
    cpus = models.PositiveIntegerField(default=0)
    memory_mb = models.PositiveBigIntegerField(default=0)
    gpus_used = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=64, blank=True)
    state_reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class SlurmAccount(TimeStampedModel):
    """Maps one Slurm account on one cluster to a Beacon team (data, not code)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="accounts")
    name = models.CharField(max_length=64)
    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE,
                             related_name="slurm_accounts")

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="slurm_account_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.name} → {self.team.slug}"


class SlurmAssociation(TimeStampedModel):
    """A Slurm association (an account, or a user in an account) with its limits and usage.

    Limits come from ``sacctmgr show assoc``, fairshare and decayed usage from ``sshare``;
    both are TRES dicts as Slurm names them (``{"gres/gpu": 16}``), usage in TRES-minutes.
    Rewritten by ``sync.sync_shares``; the quota pages read it.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="associations")
    account = models.CharField(max_length=64)
    user_name = models.CharField(max_length=64, blank=True, help_text="Empty: the account row")
    parent = models.CharField(max_length=64, blank=True)
    shares = models.CharField(max_length=32, blank=True)
    qos = models.JSONField(default=list, blank=True)
    default_qos = models.CharField(max_length=64, blank=True)
    grp_tres = models.JSONField(default=dict, blank=True, help_text="GrpTRES (concurrent)")
    grp_tres_mins = models.JSONField(default=dict, blank=True, help_text="GrpTRESMins (quota)")
    grp_tres_run_mins = models.JSONField(default=dict, blank=True)
    max_tres = models.JSONField(default=dict, blank=True)
    grp_jobs = models.IntegerField(null=True, blank=True)
    max_wall_min = models.IntegerField(null=True, blank=True)
    norm_shares = models.FloatField(null=True, blank=True)
    raw_usage = models.BigIntegerField(default=0)
    effective_usage = models.FloatField(null=True, blank=True)
    fairshare = models.FloatField(null=True, blank=True)
    level_fs = models.FloatField(null=True, blank=True)
    usage_tres_mins = models.JSONField(default=dict, blank=True,
                                       help_text="GrpTRESRaw: decayed TRES-minutes used")
    running_tres_mins = models.JSONField(default=dict, blank=True,
                                         help_text="TRESRunMins: remaining minutes of running jobs")

    class Meta:
        ordering = ["cluster", "account", "user_name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "account", "user_name"],
                                               name="slurm_association_unique")]

    def __str__(self) -> str:
        who = f"{self.account}/{self.user_name}" if self.user_name else self.account
        return f"{self.cluster.name}:{who}"


class Reservation(TimeStampedModel):
    """A Slurm reservation (``scontrol show reservation``), as the last limits sync read it
    (``sync_limits``): the live view marks its nodes' GPUs reserved while it is in force."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="reservations")
    name = models.CharField(max_length=200)
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)
    nodes = models.TextField(blank=True, help_text="Slurm host list, e.g. gpu[01-02]")
    node_names = models.JSONField(default=list, blank=True, help_text="The list expanded")
    node_count = models.IntegerField(default=0)
    partition = models.CharField(max_length=128, blank=True)
    flags = models.JSONField(default=list, blank=True)
    users = models.JSONField(default=list, blank=True)
    accounts = models.JSONField(default=list, blank=True)
    tres = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["cluster", "start", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="reservation_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.name}"

    def in_force(self, now: Any) -> bool:
        return bool(self.start and self.end and self.start <= now < self.end)


class QosLimit(TimeStampedModel):
    """A QOS and its limits (``sacctmgr show qos``), TRES dicts as Slurm names them
    (``{"gres/gpu": 16}``); null is "no limit". Rewritten by ``sync_limits``."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="qos_limits")
    name = models.CharField(max_length=64)
    description = models.CharField(max_length=500, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    flags = models.JSONField(default=list, blank=True)
    grp_tres = models.JSONField(default=dict, blank=True, help_text="GrpTRES")
    grp_jobs = models.IntegerField(null=True, blank=True, help_text="GrpJobs")
    max_tres_per_job = models.JSONField(default=dict, blank=True, help_text="MaxTRES")
    max_tres_per_node = models.JSONField(default=dict, blank=True, help_text="MaxTRESPerNode")
    max_tres_per_user = models.JSONField(default=dict, blank=True, help_text="MaxTRESPU")
    max_tres_per_account = models.JSONField(default=dict, blank=True, help_text="MaxTRESPA")
    max_jobs_per_user = models.IntegerField(null=True, blank=True, help_text="MaxJobsPU")
    max_submit_per_user = models.IntegerField(null=True, blank=True, help_text="MaxSubmitPU")
    max_wall_min = models.IntegerField(null=True, blank=True, help_text="MaxWall (minutes)")
    preempt = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["cluster", "-priority", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="qoslimit_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.name}"
