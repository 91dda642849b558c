from rest_framework.routers import SimpleRouter

from apps.security.api import views

router = SimpleRouter()
router.register("security/findings", views.FindingViewSet, basename="finding")
router.register("security/ingest", views.SecurityIngestViewSet, basename="security-ingest")
urlpatterns = router.urls
