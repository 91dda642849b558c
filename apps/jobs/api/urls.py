from rest_framework.routers import SimpleRouter

from apps.jobs.api import views

router = SimpleRouter()
# before "jobs": its detail route would read "compare" as a job's id
router.register("jobs/compare", views.JobComparisonViewSet, basename="job-compare")
router.register("jobs", views.JobViewSet, basename="job")
router.register("traces", views.TraceRunViewSet, basename="tracerun")
urlpatterns = router.urls
