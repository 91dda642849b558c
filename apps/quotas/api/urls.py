from rest_framework.routers import SimpleRouter

from apps.quotas.api import views

router = SimpleRouter()
router.register("quotas/accounts", views.QuotaAccountViewSet, basename="quota-account")
router.register("quotas/changes", views.QuotaChangeViewSet, basename="quota-change")
urlpatterns = router.urls
