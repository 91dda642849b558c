"""Accounts: teams, memberships and roles, routing contacts, and the one authorization rule."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self) -> None:
        from apps.accounts import signals  # noqa: F401  links Slurm jobs to new users
