from rest_framework.routers import SimpleRouter

from apps.chargeback.api import views

router = SimpleRouter()
router.register("chargeback/usage", views.UsageViewSet, basename="chargeback-usage")
router.register("chargeback/rates", views.RateViewSet, basename="chargeback-rate")
router.register("chargeback/periods", views.PeriodViewSet, basename="chargeback-period")
router.register("chargeback/statements", views.StatementViewSet,
                basename="chargeback-statement")
router.register("chargeback/reconciliations", views.ReconciliationViewSet,
                basename="chargeback-reconciliation")
urlpatterns = router.urls
