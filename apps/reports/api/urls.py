from rest_framework.routers import SimpleRouter

from apps.reports.api import views

router = SimpleRouter()
router.register("reports/usage", views.UsageReportViewSet, basename="reports-api-usage")
urlpatterns = router.urls
