"""Team pages: "My team" for leads, and one page per team for its members."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.generic import DetailView, TemplateView

from apps.accounts import tokens
from apps.accounts.forms import DEFAULT_LIFETIME, LIFETIMES, TokenForm
from apps.accounts.models import ApiToken, Contact, Membership, Team
from apps.accounts.permissions import VIEW, ActionRequiredMixin, signed_in
from apps.jobs.models import Job


class MyTeamView(ActionRequiredMixin, TemplateView):
    """ "My team": the teams a user belongs to, with job counts where they lead."""

    template_name = "accounts/my_team.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        memberships = (Membership.objects.filter(user=signed_in(self.request))
                       .select_related("team").order_by("team__name"))
        ctx["memberships"] = memberships
        led = [m.team_id for m in memberships if m.role == Membership.Role.LEAD]
        ctx["team_jobs"] = (Job.objects.visible_to(self.request.user)
                            .filter(team_id__in=led).select_related("cluster", "team")
                            .order_by("-submit_time", "-pk")[:25])
        return ctx


class TeamDetailView(ActionRequiredMixin, DetailView):
    template_name = "accounts/team_detail.html"
    slug_field = "slug"
    context_object_name = "team"

    def get_queryset(self) -> QuerySet[Team]:
        return Team.objects.visible_to(self.request.user)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        team = self.object
        ctx["members"] = team.memberships.select_related("user").order_by("-role", "user__username")
        ctx["accounts"] = team.slurm_accounts.select_related("cluster")
        ctx["contacts"] = Contact.objects.filter(Q(team=team) | Q(team__isnull=True))
        jobs = Job.objects.visible_to(self.request.user).filter(team=team)
        ctx["state_counts"] = jobs.values("state").annotate(n=Count("pk")).order_by("-n")
        ctx["jobs"] = jobs.select_related("cluster").order_by("-submit_time", "-pk")[:25]
        return ctx


class ApiTokensView(ActionRequiredMixin, TemplateView):
    """ "My API tokens": the user's named tokens; make one (its key is shown once) or revoke
    one. Every signed-in user may, for their own tokens only."""

    template_name = "accounts/tokens.html"
    write_action = VIEW

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx["tokens"] = ApiToken.objects.filter(user=signed_in(self.request))
        ctx["api_root"] = reverse("api:root")
        ctx["lifetimes"], ctx["default_lifetime"] = LIFETIMES, DEFAULT_LIFETIME
        ctx["now"] = timezone.now()
        return ctx

    def post(self, request: HttpRequest) -> HttpResponse:
        form = TokenForm(request.POST)
        try:
            if not form.is_valid():
                raise tokens.TokenError(" ".join(str(e) for errors in form.errors.values()
                                                 for e in errors))
            token, key = tokens.create(request.user, form.cleaned_data["name"], request,
                                       days=form.cleaned_data["expires"])
        except tokens.TokenError as exc:
            return self.render_to_response(self.get_context_data(
                error=str(exc), name=form.cleaned_data.get("name", "")), status=400)
        # rendered, not redirected: the key must never be stored to survive a redirect
        response = self.render_to_response(self.get_context_data(new_token=token, new_key=key))
        response["Cache-Control"] = "no-store"
        return response


class ApiTokenRevokeView(ActionRequiredMixin, View):
    write_action = VIEW
    http_method_names = ["post"]

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        token = get_object_or_404(ApiToken.objects.filter(user=signed_in(request)), pk=pk)
        tokens.revoke(token, request)
        messages.success(request, f"Token “{token.name}” revoked: it no longer works.")
        return HttpResponseRedirect(reverse("accounts-tokens"), status=303)
