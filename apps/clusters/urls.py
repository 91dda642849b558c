from django.urls import path

from apps.clusters import views

urlpatterns = [
    path("clusters/", views.ClusterListView.as_view(), name="clusters-list"),
    path("clusters/<slug:name>/", views.ClusterDetailView.as_view(), name="clusters-detail"),
]
