from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """Usage reports over any range (issue 30): no models of their own, only queries of
    chargeback and the SLOs called with the report's groups."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "apps.reports"
    label = "reports"
