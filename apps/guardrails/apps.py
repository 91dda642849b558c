"""Guardrails for researchers: alerts about their own running jobs, right-sizing advice and
digests, and the admins' idle-job policy (docs/diagnosis.md, "Guardrails")."""

from django.apps import AppConfig


class GuardrailsConfig(AppConfig):
    name = "apps.guardrails"
    label = "guardrails"
    verbose_name = "Guardrails"
