"""Security: findings for AI clusters from telemetry, Slurm, sshd logs, probes and inventories."""

from django.apps import AppConfig


class SecurityConfig(AppConfig):
    name = "apps.security"
    label = "security"
