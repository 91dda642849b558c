"""Guardrails: what researchers were told about their jobs, who wants to hear it, and what
the idle-job policy did.

- ``Alert``: one per job and kind (the unique constraint is the dedup), with its words;
- ``Message``: one e-mail (and webhook post) that carried alerts, a digest or a policy
  notice: the per-user rate limit counts these;
- ``AlertPreference`` / ``TeamAlertSetting``: a user's opt-out and webhook, a team's defaults;
- ``Exemption`` and ``PolicyAction``: the idle-job policy's exemptions and every step it took
  (each also in the audit log);
- ``Digest``: the weekly right-sizing digest sent to a user or a team's leads, once a week.
"""

from __future__ import annotations

from typing import Any, Self, TypeVar

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.accounts.models import Membership
from apps.core.webhooks import validate_webhook_url

WEBHOOK_FORMATS = (("slack", "Slack"), ("mattermost", "Mattermost"))
_M = TypeVar("_M", bound=models.Model)


class FollowsJobQuerySet(models.QuerySet[_M]):
    """Rows about one job (alerts, policy steps) are seen by whoever sees the job: its owner,
    a lead of its team, and admins."""

    def visible_to(self, user: Any) -> Self:
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        led = Membership.objects.filter(user=user, role=Membership.Role.LEAD).values("team_id")
        return self.filter(Q(job__user=user) | Q(job__team_id__in=led))


class AlertQuerySet(FollowsJobQuerySet["Alert"]):
    pass


class Alert(models.Model):
    """An alert about a running job, raised once per job and kind."""

    class Kind(models.TextChoices):
        GPUS_IDLE = "gpus_idle", "GPUs idle"
        MEMORY_HELD = "memory_held", "Memory held on idle GPUs"
        STRAGGLER = "straggler", "Straggler GPU"
        INPUT_STALL = "input_stall", "Input stall"

    class Status(models.TextChoices):
        PENDING = "pending", "waiting to be sent"
        SENDING = "sending", "being sent"
        SENT = "sent", "sent"
        OPTED_OUT = "opted_out", "not sent: alerts are off for this user"
        NO_ADDRESS = "no_address", "not sent: no e-mail address or webhook"
        EXPIRED = "expired", "not sent: the job ended before the rate limit allowed it"
        SIMULATED = "simulated", "not sent: replayed on a simulated cluster"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="guardrail_alerts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    gpus = models.JSONField(default=list, blank=True, help_text="host:index of the GPUs named")
    since = models.DateTimeField(help_text="When what the alert says started")
    raised_at = models.DateTimeField()
    hardware = models.BooleanField(default=False, help_text="copied to the hardware contact")
    text = models.TextField(help_text="What was seen, in words")
    advice = models.TextField(blank=True, help_text="What to check")
    detail = models.JSONField(default=dict, blank=True)
    message = models.ForeignKey("Message", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="alerts")

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-raised_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["job", "kind"], name="guardrail_alert_once")]
        indexes = [models.Index(fields=["status", "raised_at"], name="guardrail_alert_status")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.job}"


class MessageQuerySet(models.QuerySet["Message"]):
    def visible_to(self, user: Any) -> MessageQuerySet:
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        return self.all() if user.is_staff else self.filter(user=user)


class Message(models.Model):
    """One message sent (or tried): to whom, through which channels, and what it said."""

    class Kind(models.TextChoices):
        ALERT = "alert", "Job alert"
        DIGEST = "digest", "Right-sizing digest"
        TEAM_DIGEST = "team_digest", "Team right-sizing digest"
        POLICY = "policy", "Idle-job policy"
        HARDWARE = "hardware", "Copy to the hardware contact"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="guardrail_messages")
    to = models.JSONField(default=list, blank=True, help_text="e-mail addresses")
    subject = models.CharField(max_length=200)
    body = models.TextField()
    channels = models.JSONField(default=list, blank=True, help_text="the channels that worked")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    simulated = models.BooleanField(
        default=False, help_text="written for a simulated cluster (the demo): never sent")

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "kind", "-created_at"],
                                name="guardrail_message_user")]

    def __str__(self) -> str:
        return f"{self.kind} to {self.user or ', '.join(self.to)}"


class AlertPreference(models.Model):
    """One user's choices: alerts on or off (unset: the team's default), kinds left out,
    a personal Slack/Mattermost webhook, and the weekly digest."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="guardrail_preference")
    alerts = models.BooleanField(null=True, blank=True,
                                 help_text="Unset: follow the team's default")
    kinds_off = models.JSONField(default=list, blank=True, help_text="alert kinds not wanted")
    webhook_url = models.URLField(blank=True, validators=[validate_webhook_url])
    webhook_format = models.CharField(max_length=16, choices=WEBHOOK_FORMATS, default="slack")
    digest = models.BooleanField(default=True, help_text="the weekly right-sizing digest")

    def __str__(self) -> str:
        return f"alert preference of {self.user}"


class TeamAlertSetting(models.Model):
    """A team's defaults, set by its leads or an admin: alerts on or off for members who did
    not choose, and a team webhook that hears about every alert on the team's jobs."""

    team = models.OneToOneField("accounts.Team", on_delete=models.CASCADE,
                                related_name="guardrail_setting")
    alerts_default = models.BooleanField(default=True)
    webhook_url = models.URLField(blank=True, validators=[validate_webhook_url])
    webhook_format = models.CharField(max_length=16, choices=WEBHOOK_FORMATS, default="slack")
    lead_digest = models.BooleanField(default=True, help_text="the leads' weekly team digest")

    def __str__(self) -> str:
        return f"alert defaults of {self.team}"


class Exemption(models.Model):
    """A job the idle-job policy leaves alone: by user (service accounts), Slurm account,
    partition (interactive ones), or one job (an opt-out an admin granted)."""

    class Kind(models.TextChoices):
        USER = "user", "Slurm user (service account)"
        ACCOUNT = "account", "Slurm account"
        PARTITION = "partition", "Partition"
        JOB = "job", "One job"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    value = models.CharField(max_length=128, help_text="user name, account, partition or job id")
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="guardrail_exemptions",
                                help_text="Empty: every cluster")
    reason = models.CharField(max_length=300)
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "value"]
        constraints = [models.UniqueConstraint(fields=["kind", "value", "cluster"],
                                               name="guardrail_exemption_unique")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.value}"


class PolicyActionQuerySet(FollowsJobQuerySet["PolicyAction"]):
    pass


class PolicyAction(models.Model):
    """One step of the idle-job policy on one job (also written to the audit log)."""

    class Action(models.TextChoices):
        WARNED = "warned", "Warned"
        CANCELLED = "cancelled", "Cancelled"
        CLEARED = "cleared", "Warning withdrawn (busy again)"
        CANCEL_FAILED = "cancel_failed", "Cancel failed"
        EXEMPT = "exempt", "Exempt"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE,
                            related_name="guardrail_actions")
    action = models.CharField(max_length=16, choices=Action.choices)
    dry_run = models.BooleanField(default=False, help_text="recorded only: nothing was done")
    at = models.DateTimeField()
    reason = models.CharField(max_length=300)
    cancel_at = models.DateTimeField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    objects = PolicyActionQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["job", "-at"], name="guardrail_action_job")]

    def __str__(self) -> str:
        return f"{self.action}{' (dry run)' if self.dry_run else ''} on {self.job}"


class Digest(models.Model):
    """A weekly right-sizing digest, sent once per recipient, scope and week."""

    class Kind(models.TextChoices):
        USER = "user", "Own jobs"
        TEAM = "team", "A team's jobs (leads)"

    kind = models.CharField(max_length=8, choices=Kind.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="guardrail_digests")
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    week = models.DateField(help_text="Monday of the week the digest covers")
    waste = models.JSONField(default=dict, blank=True, help_text="GPU-hours by kind")
    jobs = models.PositiveIntegerField(default=0)
    message = models.ForeignKey(Message, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")

    class Meta:
        ordering = ["-week", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "user", "week"], condition=Q(team=None),
                                    name="guardrail_digest_user_week"),
            models.UniqueConstraint(fields=["kind", "user", "team", "week"],
                                    name="guardrail_digest_team_week"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} digest for {self.user} ({self.week})"
