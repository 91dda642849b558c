from django.urls import path

from apps.guardrails import views

urlpatterns = [
    path("guardrails/", views.AlertListView.as_view(), name="guardrails-alerts"),
    path("guardrails/preferences/", views.PreferenceView.as_view(),
         name="guardrails-preferences"),
    path("guardrails/jobs/<slug:cluster>/<int:job_id>/exempt/", views.ExemptJobView.as_view(),
         name="guardrails-exempt-job"),
]
