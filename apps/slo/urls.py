from django.urls import path

from apps.slo import views

urlpatterns = [
    path("slo/", views.SloListView.as_view(), name="slo-list"),
    path("slo/classification/", views.ClassificationView.as_view(), name="slo-classification"),
    path("slo/evaluate/", views.EvaluateView.as_view(), name="slo-evaluate"),
    path("slo/objectives/<int:pk>/edit/", views.ObjectiveEditView.as_view(),
         name="slo-objective-edit"),
    path("slo/teams/<slug:slug>/", views.TeamScorecardView.as_view(), name="slo-team"),
    path("slo/teams/<slug:slug>/export.csv", views.TeamScorecardExportView.as_view(),
         name="slo-team-export"),
]
