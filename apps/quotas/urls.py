from django.urls import path

from apps.quotas import views

urlpatterns = [
    path("quotas/", views.QuotaHomeView.as_view(), name="quotas-home"),
    path("quotas/accounts/<int:pk>/", views.QuotaEditView.as_view(), name="quotas-edit"),
]
