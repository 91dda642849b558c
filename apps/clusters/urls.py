from django.urls import path

from apps.clusters import views

urlpatterns = [
    path("clusters/", views.ClusterListView.as_view(), name="clusters-list"),
    path("clusters/<slug:name>/", views.ClusterDetailView.as_view(), name="clusters-detail"),
    path("clusters/<slug:name>/live/", views.ClusterLiveView.as_view(), name="clusters-live"),
    path("clusters/<slug:name>/live/state/", views.ClusterLiveStateView.as_view(),
         name="clusters-live-state"),
    path("clusters/<slug:name>/nodes/<str:node>/", views.NodeDetailView.as_view(),
         name="clusters-node"),
]
