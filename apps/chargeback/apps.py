"""Chargeback: GPU-hour statements per team and month on useful hours, the rate card, and
the reconciliation of allocated hours with Slurm's own report."""

from django.apps import AppConfig


class ChargebackConfig(AppConfig):
    name = "apps.chargeback"
    label = "chargeback"
