"""Every app's API router, mounted under /api/v1/ in one namespace ("api")."""

from django.urls import path

from apps.accounts.api.urls import urlpatterns as accounts
from apps.chargeback.api.urls import urlpatterns as chargeback
from apps.clusters.api.urls import urlpatterns as clusters
from apps.core.api.root import ApiRootView
from apps.jobs.api.urls import urlpatterns as jobs
from apps.quotas.api.urls import urlpatterns as quotas
from apps.reports.api.urls import urlpatterns as reports
from apps.security.api.urls import urlpatterns as security
from apps.shell.api.urls import urlpatterns as shell
from apps.slo.api.urls import urlpatterns as slo

app_name = "api"
urlpatterns = [path("", ApiRootView.as_view(), name="root"),
               *accounts, *chargeback, *clusters, *jobs, *quotas, *reports, *security, *shell, *slo]
