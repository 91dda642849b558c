"""Navigation for the three audiences, and the "simulated data" banner on every page."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from apps.accounts.models import Membership
from apps.clusters.models import Cluster


def navigation(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    sso = {"oidc_enabled": settings.OIDC_ENABLED, "oidc_provider_name": settings.OIDC_PROVIDER_NAME}
    if user is None or not user.is_authenticated:
        return {"nav_is_lead": False, "nav_is_staff": False, "simulated_clusters": [], **sso}
    return {
        **sso,
        "nav_is_lead": Membership.objects.filter(user=user, role=Membership.Role.LEAD).exists(),
        "nav_is_staff": user.is_staff,
        # Every page says so when what it shows comes from the simulator.
        "simulated_clusters": list(Cluster.objects.filter(is_simulated=True)
                                   .values_list("name", flat=True)),
    }
