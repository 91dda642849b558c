"""Keep jobs bound to portal users when the user appears after the jobs (first login, SSO)
or when their Slurm user name changes."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_save
from django.dispatch import receiver

from apps.accounts import services
from apps.accounts.models import Profile


@receiver(post_save, sender=get_user_model())
def _link_new_user(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if created:
        services.link_user_jobs(instance)


@receiver(post_save, sender=Profile)
def _relink_on_profile_change(sender: Any, instance: Profile, **kwargs: Any) -> None:
    services.link_user_jobs(instance.user)
