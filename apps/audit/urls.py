from django.urls import path

from apps.audit import views

urlpatterns = [
    path("platform/audit/", views.AuditListView.as_view(), name="audit-list"),
]
