from rest_framework.routers import SimpleRouter

from apps.slo.api import views

router = SimpleRouter()
router.register("slo/objectives", views.ObjectiveViewSet, basename="slo-objective")
router.register("slo/scorecards", views.ScorecardViewSet, basename="slo-scorecard")
router.register("slo/history", views.SnapshotViewSet, basename="slo-snapshot")
router.register("slo/ending-rules", views.EndingRuleViewSet, basename="slo-ending-rule")
urlpatterns = router.urls
