from django.urls import path

from apps.reports.api import views

urlpatterns = [path("reports/usage/", views.UsageReportView.as_view(),
                    name="reports-api-usage-list")]
