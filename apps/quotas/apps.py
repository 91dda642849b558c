"""Quotas: team GPU-hour quotas per month, written to Slurm (GrpTRESMins) with a preview and
an audit trail; usage against them, forecasts, warnings and drift detection."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "apps.quotas"
    label = "quotas"
