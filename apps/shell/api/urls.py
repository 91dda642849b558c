from rest_framework.routers import SimpleRouter

from apps.shell.api import views

router = SimpleRouter()
router.register("task-runs", views.TaskRunViewSet, basename="taskrun")
urlpatterns = router.urls
