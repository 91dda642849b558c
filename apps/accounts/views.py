"""Team pages: "My team" for leads, and one page per team for its members."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from django.views.generic import DetailView, TemplateView

from apps.accounts.models import Contact, Membership, Team
from apps.accounts.permissions import ActionRequiredMixin
from apps.jobs.models import Job


class MyTeamView(ActionRequiredMixin, TemplateView):
    """ "My team": the teams a user belongs to, with job counts where they lead."""

    template_name = "accounts/my_team.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        memberships = (Membership.objects.filter(user=self.request.user)
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
