"""Teams, who belongs to them, and whom to call about what.

Platform admins are ``User.is_staff``; everything else about roles is a Membership.
Slurm accounts map to teams through ``clusters.SlurmAccount`` rows, never through code.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.core.models import TimeStampedModel


class TeamQuerySet(models.QuerySet["Team"]):
    def visible_to(self, user: Any) -> TeamQuerySet:
        """Members see their teams; platform admins see all teams."""
        if not getattr(user, "is_active", False) or not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(memberships__user=user).distinct()


class Team(TimeStampedModel):
    """A research team: the unit of scorecards, quotas and chargeback."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(TimeStampedModel):
    """A user's role in a team. Leads see their team's jobs; members see their own."""

    class Role(models.TextChoices):
        MEMBER = "member"
        LEAD = "lead"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Contact(TimeStampedModel):
    """Whom a diagnosis sends people to: the storage team, the network team, hardware on-call.

    A contact may be a team of its own (``team``) or just an address. A contact bound to a
    cluster applies there only; one with no cluster is the platform-wide default.
    """

    class Area(models.TextChoices):
        DATA = "data", "Data and storage"
        NETWORK = "network", "Network and interconnect"
        HARDWARE = "hardware", "Hardware on-call"
        CODE = "code", "Code and frameworks"
        PLATFORM = "platform", "Platform team"

    area = models.CharField(max_length=16, choices=Area.choices)
    name = models.CharField(max_length=200)
    email = models.EmailField(blank=True)
    url = models.URLField(blank=True, help_text="Chat channel or ticket queue")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="contact_for")
    cluster = models.ForeignKey("clusters.Cluster", null=True, blank=True,
                                on_delete=models.CASCADE, related_name="contacts")

    class Meta:
        ordering = ["area", "name"]

    def __str__(self) -> str:
        return f"{self.get_area_display()}: {self.name}"


class Profile(TimeStampedModel):
    """What the portal knows about a user beyond Django's User: their identity elsewhere.

    ``slurm_username`` is the login name Slurm records for this person when it differs
    from the portal user name (SSO sites often sign in with an e-mail-like name while
    Slurm sees the POSIX ``uid``). ``oidc_subject`` is the identity provider's stable
    ``sub`` claim, which identifies OIDC users (never their e-mail address).
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="profile")
    slurm_username = models.CharField(
        max_length=64, blank=True, db_index=True,
        help_text="Slurm user name, when it differs from the portal user name")
    oidc_subject = models.CharField(max_length=255, blank=True,
                                    help_text="OIDC 'sub' claim of this user's identity")

    class Meta:
        constraints = [
            # Two people claiming one Slurm login would make job ownership ambiguous.
            models.UniqueConstraint(fields=["slurm_username"], condition=~Q(slurm_username=""),
                                    name="profile_slurm_username_unique"),
            models.UniqueConstraint(fields=["oidc_subject"], condition=~Q(oidc_subject=""),
                                    name="profile_oidc_subject_unique"),
        ]

    def __str__(self) -> str:
        return f"profile of {self.user}"


class ApiToken(models.Model):
    """A named API token of one user ("My API tokens"). Only a SHA-256 of the key is kept:
    the key is shown once, when it is made, and cannot be read back. Revoking deletes it;
    past ``expires_at`` (when set) it is refused. The one kind of API token: DRF's plaintext
    one-per-user tokens were moved here, hashed, by migration 0005 (issue 27)."""

    PREFIX = "bcn_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    name = models.CharField(max_length=80, help_text="what the token is for, e.g. 'CI export'")
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the key's first characters, to tell "
                                                     "tokens apart")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True,
                                      help_text="refused from then on; empty: never expires")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    def expired(self, now: Any) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @staticmethod
    def digest_of(key: str) -> str:
        import hashlib

        return hashlib.sha256(key.encode()).hexdigest()
