from rest_framework.routers import SimpleRouter

from apps.jobs.api import views

router = SimpleRouter()
router.register("jobs", views.JobViewSet, basename="job")
router.register("traces", views.TraceRunViewSet, basename="tracerun")
urlpatterns = router.urls
