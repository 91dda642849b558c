from django.urls import path

from apps.shell import views

urlpatterns = [
    path("", views.HomeView.as_view(), name="core-home"),
    path("platform/", views.PlatformView.as_view(), name="core-platform"),
    path("platform/runs/", views.TaskRunListView.as_view(), name="core-runs"),
    path("health/", views.health, name="core-health"),
    path("metrics", views.metrics_view, name="core-metrics"),
]
