from rest_framework.routers import SimpleRouter

from apps.accounts.api import views

router = SimpleRouter()
router.register("teams", views.TeamViewSet, basename="team")
urlpatterns = router.urls
