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
