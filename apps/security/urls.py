from django.urls import path

from apps.security import views

urlpatterns = [
    path("security/", views.FindingListView.as_view(), name="security-list"),
    path("security/findings/<int:pk>/", views.FindingDetailView.as_view(),
         name="security-detail"),
    path("security/findings/<int:pk>/transition/", views.FindingTransitionView.as_view(),
         name="security-transition"),
]
