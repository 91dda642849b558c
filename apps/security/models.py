"""Security findings, the rules and allow-lists admins edit, and the inputs rules read.

- ``SecurityRule``, ``AllowListEntry``, ``Advisory``: data admins edit (seeded defaults).
- ``QuietSchedule``, ``SshAllowedSource``, ``IbStorageBaseline``, ``ComponentAlias``: the
  site's configuration (recurring quiet windows, SSH sources per kind of user, storage
  baselines per node group or partition, component names).
- ``Finding`` and ``FindingEvent``: what detection found, its lifecycle and audit trail.
- ``SshLogEvent``, ``NodeInventory``, ``ServiceProbe``, ``ScriptScan``: ingested inputs.
- ``DetectionState``: one row per cluster, the claim and watermark of the detection runs.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import math
import re
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import Membership
from apps.analysis import security_rules
from apps.analysis.components import normalise
from apps.analysis.recurrence import MAX_MINUTES, Recurrence, check_zone, describe, parse_weekdays
from apps.analysis.security_types import SEVERITIES, RuleConfig
from apps.analysis.security_types import IbBaseline as IbBaselineSpec
from apps.analysis.security_types import QuietWindow as QuietWindowSpec
from apps.analysis.security_types import SshSource as SshSourceSpec
from apps.analysis.versions import Advisory as AdvisoryRecord
from apps.analysis.versions import parse_version
from apps.core.models import TimeStampedModel

SEVERITY_CHOICES = [(s, s) for s in SEVERITIES]


# --- Data admins edit -------------------------------------------------------------------------


class SecurityRule(TimeStampedModel):
    """One detection rule as this site runs it: on or off, its severity, its thresholds.

    ``key`` names a rule of ``apps.analysis.security_rules.RULES``; ``params`` holds only
    the thresholds the site changed (the rest keep their defaults).
    """

    key = models.SlugField(max_length=64, unique=True)
    number = models.PositiveSmallIntegerField(help_text="Threat number in the issue's table")
    title = models.CharField(max_length=200)
    enabled = models.BooleanField(default=True)
    severity = models.CharField(max_length=16, choices=SEVERITY_CHOICES)
    attack = models.CharField(max_length=16, blank=True, help_text="MITRE ATT&CK technique")
    params = models.JSONField(default=dict, blank=True,
                              help_text="Thresholds that differ from the defaults")
    notes = models.TextField(blank=True, help_text="Why this site changed the rule")

    class Meta:
        ordering = ["number", "key"]

    def __str__(self) -> str:
        return self.title

    @property
    def spec(self) -> security_rules.RuleSpec | None:
        return security_rules.RULES.get(self.key)

    def as_config(self) -> RuleConfig:
        return security_rules.config(self.key, enabled=self.enabled, severity=self.severity,
                                     params=self.params if isinstance(self.params, dict) else {})

    def clean(self) -> None:
        if self.key not in security_rules.RULES:
            raise ValidationError({"key": f"{self.key!r} is not a known rule"})
        if not isinstance(self.params, dict):
            raise ValidationError({"params": "expected an object of thresholds"})
        problems = security_rules.check_params(self.key, self.params)
        if problems:
            raise ValidationError({"params": problems})


class AllowListEntry(TimeStampedModel):
    """Something admins allow, for one cluster or all (``cluster`` empty).

    ``value`` is a user name (admin and exempt users), a node name or glob (quiet nodes:
    maintenance, drain, burn-in, health checks, optionally between ``starts_at`` and
    ``ends_at``), or ``software=version`` (a patched version string: a backport).
    """

    class Kind(models.TextChoices):
        ADMIN_USER = "admin_user", "Admin user (SSH to any node)"
        EXEMPT_USER = "exempt_user", "Service account (health checks, burn-in)"
        QUIET_NODES = "quiet_nodes", "Quiet nodes (maintenance, drain, burn-in)"
        VERSION = "version", "Patched version string (backport)"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="security_allow_list")
    value = models.CharField(max_length=200)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=300)

    class Meta:
        ordering = ["kind", "value"]
        verbose_name_plural = "allow-list entries"

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.value}"

    def clean(self) -> None:
        value = (self.value or "").strip()
        if not value:
            raise ValidationError({"value": "required"})
        if self.kind == self.Kind.VERSION and ("=" not in value or not value.split("=", 1)[1]):
            raise ValidationError({"value": "write software=version, e.g. munge=0.5.15-2+deb12u1"})
        if self.kind == self.Kind.QUIET_NODES and not fnmatch.translate(value):
            raise ValidationError({"value": "a node name or glob, e.g. gpu0*"})
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "must be after starts_at"})


class Advisory(TimeStampedModel):
    """A vulnerability advisory: which versions of a component it affects.

    ``fixed_versions`` lists one fixed version per maintained branch ("22.05.11, 23.02.7,
    23.11.1"); ``affected_from`` is the first affected version when older ones are safe.
    """

    software = models.CharField(max_length=100, help_text="As node inventories name it")
    fixed_versions = models.CharField(max_length=300)
    affected_from = models.CharField(max_length=50, blank=True)
    branch_depth = models.PositiveSmallIntegerField(default=2)
    cves = models.CharField(max_length=300, help_text="CVE ids, comma-separated")
    severity = models.CharField(max_length=16, choices=SEVERITY_CHOICES, default="high")
    note = models.CharField(max_length=300, blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["software", "cves"]
        verbose_name_plural = "advisories"  # not Django's "advisorys"

    def __str__(self) -> str:
        return f"{self.software} < {self.fixed_versions} ({self.cves})"

    def as_record(self) -> AdvisoryRecord:
        return AdvisoryRecord(self.software, _split(self.fixed_versions), _split(self.cves),
                              self.severity, self.affected_from, self.branch_depth, self.note)

    def clean(self) -> None:
        bad = [v for v in _split(self.fixed_versions) if parse_version(v) is None]
        if bad or not _split(self.fixed_versions):
            raise ValidationError({"fixed_versions": f"not versions: {', '.join(bad) or '(none)'}"})
        if self.affected_from and parse_version(self.affected_from) is None:
            raise ValidationError({"affected_from": "not a version"})


class QuietSchedule(TimeStampedModel):
    """A quiet window: nodes (a glob), optionally only some of their GPUs, where the
    telemetry rules stay quiet, once or on a schedule (a health check daily at 04:00 for
    5 minutes; maintenance on Tuesdays 08:00-14:00), in the cluster's time zone unless
    ``timezone`` says otherwise.

    ``once``: from ``starts_at`` to ``ends_at``. ``daily``/``weekly``: at ``start_time`` for
    ``minutes``, on ``weekdays`` for weekly ones, between ``starts_at`` and ``ends_at`` when
    given. GPU-scoped windows quiet those GPUs only: node-level rules (InfiniBand) still
    run on the node.
    """

    class Repeat(models.TextChoices):
        ONCE = "once", "Once (from starts at to ends at)"
        DAILY = "daily", "Every day"
        WEEKLY = "weekly", "Every week, on the weekdays given"

    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="quiet_schedules",
                                help_text="Empty: every cluster")
    nodes = models.CharField(max_length=200, help_text="A node name or glob: gpu07, gpu0*, "
                                                       "gpu[0-3]*")
    gpus = models.CharField(max_length=300, blank=True,
                            help_text="Empty: the whole node. Else GPU indices or UUIDs, "
                                      "comma-separated: 0,3 or GPU-5f1c...")
    repeat = models.CharField(max_length=8, choices=Repeat.choices, default=Repeat.DAILY)
    weekdays = models.CharField(max_length=60, blank=True,
                                help_text="Weekly windows: tue, or mon,thu, or mon-fri")
    start_time = models.TimeField(null=True, blank=True,
                                  help_text="Daily and weekly windows: local start, e.g. 04:00")
    minutes = models.PositiveIntegerField(null=True, blank=True,
                                          help_text="Daily and weekly windows: how long")
    timezone = models.CharField(max_length=64, blank=True,
                                help_text="Empty: the cluster's time zone (UTC for all "
                                          "clusters)")
    starts_at = models.DateTimeField(null=True, blank=True,
                                     help_text="Once: the start. Recurring: the first day "
                                               "(empty: from now on)")
    ends_at = models.DateTimeField(null=True, blank=True,
                                   help_text="Once: the end. Recurring: the last day (empty: "
                                             "no end)")
    reason = models.CharField(max_length=300)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["nodes", "start_time", "id"]
        verbose_name = "quiet window"

    def __str__(self) -> str:
        scope = f"{self.nodes} GPU {self.gpus}" if self.gpus else self.nodes
        return f"{scope}: {self.when()}"

    def when(self) -> str:
        if self.repeat == self.Repeat.ONCE:
            start = f"{self.starts_at:%Y-%m-%d %H:%M}" if self.starts_at else "?"
            end = f"{self.ends_at:%Y-%m-%d %H:%M}" if self.ends_at else "?"
            return f"{start} .. {end} UTC"
        rec = self.recurrence(self.timezone or "UTC")
        return describe(rec) if rec else "?"

    def gpu_set(self) -> frozenset[str]:
        return frozenset(part.strip() for part in self.gpus.split(",") if part.strip())

    def recurrence(self, zone: str) -> Recurrence | None:
        """The schedule in ``zone`` (the cluster's when ``timezone`` is empty)."""
        if self.repeat == self.Repeat.ONCE or self.start_time is None or not self.minutes:
            return None
        tz = self.timezone or zone
        tz = "UTC" if check_zone(tz) else tz  # clean() refuses it; never fail a run on it
        local = ZoneInfo(tz)
        days = parse_weekdays(self.weekdays) if self.repeat == self.Repeat.WEEKLY else frozenset()
        return Recurrence(self.start_time, float(self.minutes), days, tz,
                          self.starts_at.astimezone(local).date() if self.starts_at else None,
                          self.ends_at.astimezone(local).date() if self.ends_at else None)

    def as_window(self, zone: str) -> QuietWindowSpec:
        """The window the rules read, in the cluster's time zone ``zone``."""
        if self.repeat == self.Repeat.ONCE:
            return QuietWindowSpec(self.nodes.strip(), _stamp(self.starts_at),
                                   _stamp(self.ends_at), self.reason, self.gpu_set())
        return QuietWindowSpec(self.nodes.strip(), None, None, self.reason, self.gpu_set(),
                               self.recurrence(zone))

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if not self.nodes.strip():
            errors["nodes"] = "a node name or glob, e.g. gpu0*"
        bad = [g for g in self.gpu_set() if not _GPU.match(g)]
        if bad:
            errors["gpus"] = f"not a GPU index or UUID: {', '.join(bad)}"
        if self.timezone and check_zone(self.timezone):
            errors["timezone"] = check_zone(self.timezone)
        if self.repeat == self.Repeat.ONCE:
            if not (self.starts_at and self.ends_at):
                errors["starts_at"] = "a one-off window needs its start and end"
        else:
            if self.start_time is None:
                errors["start_time"] = "when the window starts, e.g. 04:00"
            if not self.minutes or self.minutes > MAX_MINUTES:
                errors["minutes"] = f"how long it lasts: 1 to {MAX_MINUTES} minutes"
        if self.repeat == self.Repeat.WEEKLY:
            try:
                if not parse_weekdays(self.weekdays):
                    errors["weekdays"] = "which weekdays, e.g. tue or mon,thu"
            except ValueError as exc:
                errors["weekdays"] = str(exc)
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            errors["ends_at"] = "must be after starts at"
        if errors:
            raise ValidationError(errors)


class SshAllowedSource(TimeStampedModel):
    """A network SSH logins to compute nodes may come from, and for whom: login nodes for
    everyone, an admin bastion for admin users only, health-check runners for service
    accounts. Read by ``ssh_unexpected_source``: a login from a network not listed for
    that kind of user is a finding (the rule is off while nothing is listed)."""

    class Who(models.TextChoices):
        EVERYONE = "everyone", "Everyone (login and transfer nodes)"
        ADMINS = "admins", "Admin users only (a bastion)"
        SERVICE = "service", "Service accounts only"

    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="ssh_sources",
                                help_text="Empty: every cluster")
    name = models.CharField(max_length=100, help_text="e.g. login nodes, admin bastion")
    network = models.CharField(max_length=64, help_text="An address or CIDR: 10.20.0.0/24, "
                                                        "10.30.0.5, fd00:20::/64")
    who = models.CharField(max_length=16, choices=Who.choices, default=Who.EVERYONE)
    reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["who", "network"]
        verbose_name = "allowed SSH source"

    def __str__(self) -> str:
        return f"{self.name} {self.network} ({self.get_who_display()})"

    def as_source(self) -> SshSourceSpec:
        return SshSourceSpec(self.network.strip(), self.who, self.name)

    def clean(self) -> None:
        try:
            ipaddress.ip_network(self.network.strip(), strict=False)
        except ValueError:
            raise ValidationError({"network": "an address or CIDR, e.g. 10.20.0.0/24"}) from None


class IbStorageBaseline(TimeStampedModel):
    """The InfiniBand traffic storage alone puts on a node group or a Slurm partition
    (Lustre o2ib, GPFS verbs): ``ib_traffic_without_multinode_job`` flags a node without a
    multi-node job only above this. A node in several groups gets the largest."""

    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="ib_baselines",
                                help_text="Empty: every cluster")
    name = models.CharField(max_length=100, help_text="e.g. storage-heavy rack")
    nodes = models.CharField(max_length=200, blank=True,
                             help_text="A node name or glob (or give a partition)")
    partition = models.CharField(max_length=128, blank=True,
                                 help_text="A Slurm partition (or give nodes)")
    gbytes_per_s = models.FloatField(help_text="GB/s (10^9 bytes per second), rx + tx of "
                                               "all ports")
    reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "InfiniBand storage baseline"

    def __str__(self) -> str:
        where = f"partition {self.partition}" if self.partition else self.nodes
        return f"{self.name}: {self.gbytes_per_s:g} GB/s on {where}"

    def as_baseline(self) -> IbBaselineSpec:
        return IbBaselineSpec(self.gbytes_per_s * 1e9, self.nodes.strip(),
                              self.partition.strip(), self.name)

    def clean(self) -> None:
        if bool(self.nodes.strip()) == bool(self.partition.strip()):
            raise ValidationError({"nodes": "give nodes (a glob) or a partition, not both"})
        if self.gbytes_per_s is None or not math.isfinite(self.gbytes_per_s) \
                or self.gbytes_per_s <= 0:
            raise ValidationError({"gbytes_per_s": "a rate above 0"})


class ComponentAlias(TimeStampedModel):
    """Another name of a software component, so advisories and inventories meet: the
    site's names on top of the built-in ones (``apps/analysis/components.py``: torch is
    pytorch, nvidia-ctk is nvidia_container_toolkit...). Compared normalised: case, ``-``,
    ``_``, ``.`` and spaces do not matter."""

    alias = models.CharField(max_length=100, unique=True, help_text="e.g. pt, site-torch")
    component = models.CharField(max_length=100, help_text="The name advisories use, e.g. "
                                                           "pytorch")
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["component", "alias"]
        verbose_name_plural = "component aliases"

    def __str__(self) -> str:
        return f"{self.alias} = {self.component}"

    def clean(self) -> None:
        alias, component = normalise(self.alias), normalise(self.component)
        if not alias or not component:
            raise ValidationError({"alias": "both names are needed"})
        if alias == component:
            raise ValidationError({"alias": "the alias is the component's own name"})
        self.alias, self.component = alias, component


_GPU = re.compile(r"^(?:\d{1,3}|(?:GPU|MIG)-[0-9A-Za-z/-]{1,80})$")


def _stamp(value: Any) -> float | None:
    return value.timestamp() if value else None


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


# --- Findings ---------------------------------------------------------------------------------


class FindingQuerySet(models.QuerySet["Finding"]):
    def visible_to(self, user: Any) -> FindingQuerySet:
        """The one visibility rule for findings.

        Admins see all; a lead sees the findings about the teams they lead (the finding's
        team or its job's team); a researcher sees the findings about their own jobs.
        Inactive and anonymous users see nothing.
        """
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
        return self.filter(Q(job__user=user) | Q(team_id__in=led) | Q(job__team_id__in=led))


class Finding(models.Model):
    """One security finding: what rule saw, about what, since when, and where it stands.

    ``dedup_key`` (rule + condition) is unique per cluster: the same condition seen again
    updates this row (``last_seen``, ``occurrences``) instead of adding one. ``evidence``
    is JSON built by the rule (query, values, window, links); keys in ``PRIVATE_EVIDENCE``
    are shown to platform admins only. Secrets are never in it, only their fingerprints.
    """

    class Status(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"
        SUPPRESSED = "suppressed"

    PRIVATE_EVIDENCE = frozenset({"query", "queries", "other_jobs", "candidates", "source_ip",
                                  "users", "sources"})

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE,
                                related_name="security_findings")
    rule = models.ForeignKey(SecurityRule, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="findings")
    rule_key = models.SlugField(max_length=64)
    title = models.CharField(max_length=300)
    severity = models.CharField(max_length=16, choices=SEVERITY_CHOICES)
    confidence = models.CharField(max_length=8, blank=True)
    attack = models.CharField(max_length=16, blank=True)
    node_name = models.CharField(max_length=128, blank=True)
    node = models.ForeignKey("clusters.Node", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="security_findings")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    gpu_uuid = models.CharField(max_length=64, blank=True)
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="security_findings")
    job_id_raw = models.BigIntegerField(null=True, blank=True, help_text="Slurm job id")
    user_name = models.CharField(max_length=64, blank=True, help_text="Slurm user name")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="security_findings")
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="security_findings")
    evidence = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    occurrences = models.PositiveIntegerField(default=1)
    dedup_key = models.CharField(max_length=300)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    assignee = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="assigned_findings")
    status_reason = models.TextField(blank=True)
    suppressed_until = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    notify_pending = models.BooleanField(
        default=False, help_text="Waiting for the next digest (non-critical findings)")
    notified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = FindingQuerySet.as_manager()

    class Meta:
        ordering = ["-last_seen", "-id"]
        constraints = [models.UniqueConstraint(fields=["cluster", "dedup_key"],
                                               name="finding_dedup_unique")]
        indexes = [
            models.Index(fields=["status", "-last_seen"], name="finding_status_seen"),
            models.Index(fields=["rule_key", "-last_seen"], name="finding_rule_seen"),
            models.Index(fields=["notify_pending"], condition=Q(notify_pending=True),
                         name="finding_notify_pending"),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.severity})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.OPEN, self.Status.ACKNOWLEDGED)

    def evidence_for(self, user: Any) -> dict[str, Any]:
        """The evidence this user may read: admins all of it, others without private keys."""
        evidence = self.evidence if isinstance(self.evidence, dict) else {}
        if getattr(user, "is_staff", False):
            return evidence
        return {k: v for k, v in evidence.items() if k not in self.PRIVATE_EVIDENCE}

    @property
    def redacted(self) -> bool:
        evidence = self.evidence if isinstance(self.evidence, dict) else {}
        return bool(self.PRIVATE_EVIDENCE & set(evidence))


class FindingEvent(models.Model):
    """One change of a finding: who (empty: the detector), what, why, and its assignee then.

    Append-only; written by ``apps.security.findings`` and the detection run only.
    """

    class Action(models.TextChoices):
        OPENED = "opened"
        REOPENED = "reopened"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"
        SUPPRESSED = "suppressed"
        UNSUPPRESSED = "unsuppressed", "suppression ended"
        ASSIGNED = "assigned"
        ESCALATED = "escalated", "severity raised"
        NOTIFIED = "notified"
        COMMENTED = "commented"

    finding = models.ForeignKey(Finding, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="finding_events")
    action = models.CharField(max_length=16, choices=Action.choices)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16, blank=True)
    assignee = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(blank=True)
    until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["finding", "at", "id"]

    def __str__(self) -> str:
        return f"{self.action} {self.finding_id} at {self.at:%Y-%m-%d %H:%M}"


# --- Inputs ---------------------------------------------------------------------------------


class SshLogEvent(models.Model):
    """One sshd event from a node's log (file or API ingest); ``digest`` of the line makes
    ingesting the same lines twice a no-op."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE,
                                related_name="ssh_events")
    host = models.CharField(max_length=128)
    at = models.DateTimeField()
    kind = models.CharField(max_length=16)
    user_name = models.CharField(max_length=64, blank=True)
    source = models.GenericIPAddressField(null=True, blank=True)
    method = models.CharField(max_length=40, blank=True)
    pid = models.PositiveIntegerField(default=0)
    digest = models.CharField(max_length=32)

    class Meta:
        ordering = ["at", "id"]
        constraints = [models.UniqueConstraint(fields=["cluster", "digest"],
                                               name="sshlogevent_unique")]
        indexes = [models.Index(fields=["cluster", "at"], name="sshlogevent_cluster_at")]

    def __str__(self) -> str:
        return f"{self.host} {self.kind} {self.user_name} at {self.at:%Y-%m-%d %H:%M:%S}"


class NodeInventory(models.Model):
    """A node's software versions, as its last inventory reported them."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE,
                                related_name="node_inventories")
    node = models.CharField(max_length=128)
    collected_at = models.DateTimeField()
    software = models.JSONField(default=dict)
    received_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "node"]
        verbose_name_plural = "node inventories"
        constraints = [models.UniqueConstraint(fields=["cluster", "node"],
                                               name="nodeinventory_unique")]

    def __str__(self) -> str:
        return f"{self.node} ({self.collected_at:%Y-%m-%d})"


class ServiceProbe(models.Model):
    """One GET of a service port on a compute node: what answered, and whether it asked
    for authentication (collector output or ``manage.py probe_services``)."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE,
                                related_name="service_probes")
    node = models.CharField(max_length=128)
    port = models.PositiveIntegerField()
    service = models.CharField(max_length=64, blank=True)
    url = models.CharField(max_length=500, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    auth_required = models.BooleanField(null=True, blank=True)
    job_id_raw = models.BigIntegerField(null=True, blank=True)
    user_name = models.CharField(max_length=64, blank=True)
    observed_at = models.DateTimeField()

    class Meta:
        ordering = ["-observed_at", "node", "port"]
        constraints = [models.UniqueConstraint(fields=["cluster", "node", "port", "observed_at"],
                                               name="serviceprobe_unique")]
        indexes = [models.Index(fields=["cluster", "observed_at"], name="serviceprobe_seen")]

    def __str__(self) -> str:
        return f"{self.node}:{self.port} {self.status}"


class ScriptScan(models.Model):
    """A job whose stored script (and environment) was scanned, so it is not fetched again.
    Only the counts are kept, never the script."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="script_scan")
    scanned_at = models.DateTimeField(default=timezone.now)
    had_script = models.BooleanField(default=False)
    secrets = models.PositiveSmallIntegerField(default=0)

    def __str__(self) -> str:
        return f"scan of {self.job_id}"


class DetectionState(models.Model):
    """Per cluster: the claim (one detection run at a time) and the telemetry watermark
    (the end of the last window whose telemetry was read), so a run after an outage
    catches up from there."""

    cluster = models.OneToOneField("clusters.Cluster", on_delete=models.CASCADE,
                                   related_name="detection_state")
    running_since = models.DateTimeField(null=True, blank=True)
    telemetry_until = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"detection of {self.cluster_id}"
