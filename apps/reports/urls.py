from django.urls import path

from apps.reports import views

urlpatterns = [
    path("reports/", views.ReportView.as_view(), name="reports-usage"),
    path("reports/export.csv", views.ReportExportView.as_view(), name="reports-usage-export"),
]
