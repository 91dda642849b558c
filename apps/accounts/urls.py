from django.contrib.auth import views as auth_views
from django.urls import path

from apps.accounts import views

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True),
         name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("team/", views.MyTeamView.as_view(), name="accounts-my-team"),
    path("teams/<slug:slug>/", views.TeamDetailView.as_view(), name="accounts-team-detail"),
    path("account/tokens/", views.ApiTokensView.as_view(), name="accounts-tokens"),
    path("account/tokens/<int:pk>/revoke/", views.ApiTokenRevokeView.as_view(),
         name="accounts-token-revoke"),
]
