from django.urls import path

from apps.jobs import views

urlpatterns = [
    path("jobs/", views.JobListView.as_view(), name="jobs-list"),
    path("jobs/export.csv", views.JobExportView.as_view(), name="jobs-export"),
    path("jobs/compare/", views.JobCompareView.as_view(), name="jobs-compare"),
    path("jobs/<slug:cluster>/<int:job_id>/", views.JobDetailView.as_view(), name="jobs-detail"),
    path("jobs/<slug:cluster>/<int:job_id>/metrics/", views.JobMetricsPartialView.as_view(),
         name="jobs-metrics"),
    path("jobs/<slug:cluster>/<int:job_id>/traces/", views.JobTraceUploadView.as_view(),
         name="jobs-traces"),
    path("jobs/<slug:cluster>/<int:job_id>/accept/", views.AcceptImplausibleView.as_view(),
         name="jobs-accept"),
]
