"""Cluster filters for any page that shows a cluster's Slurm backend."""

from __future__ import annotations

from django import template

from apps.clusters import services
from apps.clusters.models import Cluster

register = template.Library()


@register.filter
def backend_note(cluster: Cluster) -> str:
    """The plain note for a backend that has not run against a real Slurm here ("" if none)."""
    return services.backend_note(cluster)


@register.filter
def tres_gpus(tres: dict[str, int] | None) -> str:
    """A TRES limit's GPUs as a QOS table shows them: ``8`` for ``gres/gpu=8``, each typed
    limit after it (``h100: 4``); "" when the limit names no GPU (no limit on GPUs)."""
    tres = tres or {}
    parts = [str(tres["gres/gpu"])] if "gres/gpu" in tres else []
    parts += [f"{k.split(':', 1)[1]}: {v}" for k, v in sorted(tres.items())
              if k.startswith("gres/gpu:")]
    return ", ".join(parts)
