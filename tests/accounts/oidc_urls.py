"""The portal's URLs with OIDC switched on, as portal/urls.py does when OIDC_RP_CLIENT_ID is set."""

from django.urls import include, path

from portal.urls import urlpatterns as portal_urls

urlpatterns = [*portal_urls, path("oidc/", include("mozilla_django_oidc.urls"))]
