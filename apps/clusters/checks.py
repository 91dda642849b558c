"""System checks of the clusters app: the site's default metric catalogue must build."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from apps.clusters.adapters.catalogue import Catalogue, CatalogueError


@register()
def check_gpu_exporters(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """GPU_EXPORTERS and AMD_METRICS_PREFIX are read by every cluster without its own:
    a typo is named at start-up, not at the first archive."""
    try:
        Catalogue.from_config({}, {"exporters": settings.GPU_EXPORTERS,
                                   "amd_prefix": settings.AMD_METRICS_PREFIX})
    except CatalogueError as exc:
        return [Error(f"GPU_EXPORTERS={','.join(settings.GPU_EXPORTERS)!r}, AMD_METRICS_PREFIX="
                      f"{settings.AMD_METRICS_PREFIX!r}: {exc}",
                      hint="GPU_EXPORTERS=dcgm,amd; AMD_METRICS_PREFIX=amd_",
                      id="clusters.E003")]
    return []
