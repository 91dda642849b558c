"""``manage.py setup_cluster``: create or update the cluster described by the environment.

Reads SLURM_CLUSTER (the Slurm ClusterName, required), SLURM_BACKEND (cli|rest|pyslurm|files|none),
SLURM_FILES_DIR (files),
SLURM_TIMEOUT, SLURM_REST_URL / SLURM_REST_USER / SLURM_REST_TOKEN_FILE / SLURM_REST_VERSION
(rest) and PROMETHEUS_URL, through settings. Idempotent: a re-run updates the same row and
keeps options it does not manage (e.g. an ssh login node set in the admin).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.clusters.models import Cluster


def _backend_options() -> dict[str, Any]:
    options: dict[str, Any] = {"timeout": settings.SLURM_TIMEOUT}
    if settings.SLURM_BACKEND == "rest":
        if not settings.SLURM_REST_URL:
            raise CommandError("SLURM_BACKEND=rest needs SLURM_REST_URL")
        options.update(url=settings.SLURM_REST_URL, user=settings.SLURM_REST_USER,
                       token_file=settings.SLURM_REST_TOKEN_FILE,
                       version=settings.SLURM_REST_VERSION)
    if settings.SLURM_BACKEND == "files":
        if not settings.SLURM_FILES_DIR:
            raise CommandError("SLURM_BACKEND=files needs SLURM_FILES_DIR (saved sacct/squeue/"
                               "sinfo output; see apps/clusters/adapters/slurm/files.py)")
        options.update(dir=settings.SLURM_FILES_DIR)
    return options


class Command(BaseCommand):
    help = "Create or update the cluster named by SLURM_CLUSTER from the environment."

    def handle(self, *args: Any, **options: Any) -> None:
        name = settings.SLURM_CLUSTER
        if not name:
            raise CommandError("set SLURM_CLUSTER to the Slurm ClusterName")
        cluster, created = Cluster.objects.get_or_create(name=name)
        cluster.slurm_backend = settings.SLURM_BACKEND
        cluster.slurm_settings = {**(cluster.slurm_settings or {}), **_backend_options()}
        if settings.PROMETHEUS_URL:
            cluster.prometheus_url = settings.PROMETHEUS_URL
        try:
            cluster.full_clean()
        except ValidationError as exc:
            raise CommandError(f"cluster {name}: {exc}") from None
        cluster.save()
        verb = "created" if created else "updated"
        self.stdout.write(f"cluster {name} {verb}: backend {cluster.slurm_backend}, "
                          f"options {sorted(cluster.slurm_settings)}")
