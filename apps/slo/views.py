"""SLO pages: the overview (admins: every team, the platform and partitions, least budget
first, as Pyrra sorts; others: their teams), a team's scorecard with its trend, worst jobs
and monthly history, its CSV export, the ending classification, and the admins' edits.

Scorecards are read through ``Scorecard.objects.visible_to(user)``: members of a team (leads
and researchers) see its scorecards read-only, others get a 404; the worst jobs listed are
only those the user may see (``Job.objects.visible_to``). Pages render stored results only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views import View
from django.views.generic import TemplateView

from apps.accounts.models import Team
from apps.accounts.permissions import ADMIN, ActionRequiredMixin
from apps.analysis.figures import gpu_seconds_text
from apps.analysis.pending import wait_cause_table
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.chargeback.usage import held_back
from apps.core.filtering import filter_messages, page_filterset
from apps.jobs import plausibility
from apps.jobs.models import Job
from apps.jobs.views import HttpResponseSeeOther
from apps.slo import charts, services
from apps.slo.filters import ScorecardFilterSet
from apps.slo.models import EndingRule, Objective, Scorecard, Snapshot
from apps.slo.notify import open_alerts
from apps.slo.templatetags.slo import pct, rate, status_words

HISTORY_MONTHS = 12


def visible_worst(cards: Iterable[Scorecard], user: Any) -> None:
    """Keep on each card only the worst jobs ``user`` may see (``card.shown_worst``) and
    count the others (``card.hidden_worst``)."""
    cards = list(cards)
    pks = {w["job"] for c in cards for w in c.worst_jobs or []}
    seen = set(Job.objects.visible_to(user).filter(pk__in=pks).values_list("pk", flat=True))
    for card in cards:
        card.shown_worst = [w for w in card.worst_jobs or [] if w["job"] in seen]
        card.hidden_worst = len(card.worst_jobs or []) - len(card.shown_worst)


def _rows(cards: list[Scorecard]) -> list[dict[str, Any]]:
    """What each overview row prints, formatted once here (150 rows and more: the template
    only places strings)."""
    urls: dict[str, str] = {}
    out = []
    for card in cards:
        rates = card.burn_rates or {}
        url = ""
        if card.team is not None:
            url = urls.setdefault(card.team.slug, reverse("slo-team", args=[card.team.slug]))
        out.append({
            "card": card, "url": url, "who": card.team.name if card.team is not None else
            card.subject_label, "status": card.status, "status_words": status_words(card.status),
            "sli": pct(card.sli), "target": card.objective.target_text,
            "budget": pct(card.budget_remaining, 0), "negative": card.budget_remaining < 0,
            "rates": [rate(rates.get(w)) for w in ("1h", "6h", "1d", "3d")],
            "spent_by": "spent" if card.budget_remaining <= 0 and card.total else
            f"{card.exhaustion_at:%Y-%m-%d %H:%M}" if card.exhaustion_at else "—",
            "events": events_text(card)})
    return out


def events_text(card: Scorecard) -> str:
    """What an SLI counted, with its unit (issue 26: "Events 26130362" were GPU-seconds):
    measured GPU-hours for efficiency, jobs started or ended for the others."""
    if card.objective.sli == Objective.Sli.GPU_EFFICIENCY:
        return gpu_seconds_text(card.total)
    noun = "started" if card.objective.sli == Objective.Sli.QUEUE_WAIT else "ended"
    return f"{card.total:,.0f} jobs {noun}"


class SloListView(ActionRequiredMixin, TemplateView):
    """Every scorecard the user may see, least budget left first."""

    template_name = "slo/list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        filterset = page_filterset(
            ScorecardFilterSet, self.request.GET, request=self.request,
            queryset=Scorecard.objects.visible_to(self.request.user)
            .select_related("objective", "team").defer("trend", "worst_jobs", "details"))
        cards = list(filterset.qs.order_by("budget_remaining", "objective__order", "subject")
                     if filterset.is_valid() else Scorecard.objects.none())
        alerts = open_alerts(cards)
        for card in cards:
            card.open_alerts = alerts.get((card.objective_id, card.subject), [])
        team_cards = [c for c in cards if c.team_id]
        ctx.update(filter=filterset, filter_errors=filter_messages(filterset),
                   team_cards=team_cards, team_rows=_rows(team_cards),
                   other_cards=[c for c in cards if not c.team_id],
                   other_rows=_rows([c for c in cards if not c.team_id]),
                   objectives=Objective.objects.visible_to(self.request.user)
                   .select_related("team", "cluster"),
                   evaluated_at=max((c.evaluated_at for c in cards), default=None),
                   held_back=_held_back(self.request.user, cards),
                   budget_figure=charts.budgets(
                       [(f"{c.subject_label} · {c.objective.name}", c.budget_remaining,
                         c.status) for c in team_cards[:40] if c.total > 0])
                   if any(c.total > 0 for c in team_cards) else None)
        return ctx


def _team_cards(request: HttpRequest, slug: str) -> tuple[Team, list[Scorecard]]:
    team = get_object_or_404(Team.objects.visible_to(request.user), slug=slug)
    cards = list(Scorecard.objects.visible_to(request.user).filter(team=team)
                 .select_related("objective", "team").order_by("objective__order"))
    visible_worst(cards, request.user)
    return team, cards


class TeamScorecardView(ActionRequiredMixin, TemplateView):
    """A team's scorecard: each SLO's status, budget, burn rates, trend and worst jobs, and
    the monthly history."""

    template_name = "slo/team.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        team, cards = _team_cards(self.request, kwargs["slug"])
        alerts = open_alerts(cards)
        for card in cards:
            card.figure = charts.trend(card.trend, card.target, card.objective.name) \
                if card.trend else None
            card.figure_id = f"fig-slo-{card.objective.pk}"
            card.open_alerts = alerts.get((card.objective_id, card.subject), [])
        ctx.update(team=team, cards=cards, history=_history(self.request.user, team),
                   evaluated_at=max((c.evaluated_at for c in cards), default=None),
                   held_back=_held_back(self.request.user, cards, team))
        return ctx


def _held_back(user: Any, cards: list[Scorecard],
               team: Team | None = None) -> dict[str, Any] | None:
    """The implausible records the scorecards' windows leave out (issue 25), among the
    jobs ``user`` may see."""
    if not cards:
        return None
    jobs = Job.objects.visible_to(user)
    if team is not None:
        jobs = jobs.filter(team=team)
    lo, hi = min(c.window_start for c in cards), max(c.window_end for c in cards)
    return plausibility.held_back_note(held_back(jobs, lo, hi), user, team)


def _history(user: Any, team: Team) -> dict[str, Any]:
    """Months as columns, SLOs as rows: each cell the month's snapshot."""
    snaps = list(Snapshot.objects.visible_to(user).filter(team=team)
                 .select_related("objective").order_by("-month")[:HISTORY_MONTHS * 10])
    months = sorted({s.month for s in snaps}, reverse=True)[:HISTORY_MONTHS]
    by_key = {(s.objective_id, s.month): s for s in snaps}
    objectives = sorted({s.objective for s in snaps}, key=lambda o: (o.order, o.name))
    return {"months": months,
            "rows": [(o, [by_key.get((o.pk, m)) for m in months]) for o in objectives]}


class TeamScorecardExportView(ActionRequiredMixin, View):
    """The team's scorecard as CSV (the worst jobs the user may see)."""

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        team, cards = _team_cards(request, slug)
        for card in cards:
            card.worst_jobs = card.shown_worst
        response = HttpResponse(services.export_csv(cards),
                                content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="slo-{team.slug}.csv"'
        return response


class ClassificationView(ActionRequiredMixin, TemplateView):
    """How job endings and waits are classified: the tables the SLIs use, as they are."""

    template_name = "slo/classification.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        ctx.update(rules=EndingRule.objects.visible_to(self.request.user),
                   waits=wait_cause_table())
        return ctx


# --- Admin edits -------------------------------------------------------------------------------


class ObjectiveForm(forms.ModelForm):
    class Meta:
        model = Objective
        fields = ["name", "description", "sli", "target", "wait_minutes", "window", "scope",
                  "team", "cluster", "partition", "enabled", "notify", "order"]
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}


class ObjectiveEditView(ActionRequiredMixin, TemplateView):
    """Admins change an SLO's target, window, scope and switches (others: 403)."""

    template_name = "slo/edit.html"
    required_action = ADMIN
    write_action = ADMIN

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        ctx = super().get_context_data(**kwargs)
        objective = get_object_or_404(Objective.objects.visible_to(self.request.user),
                                      pk=kwargs["pk"])
        ctx.update(objective=objective,
                   form=kwargs.get("form") or ObjectiveForm(instance=objective))
        return ctx

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        objective = get_object_or_404(Objective.objects.visible_to(request.user), pk=pk)
        form = ObjectiveForm(request.POST, instance=objective)
        if not form.is_valid():
            return self.render_to_response(self.get_context_data(pk=pk, form=form))
        saved = form.save()
        audit.record(AuditEvent.Action.ADMIN, request, request.user,
                     target=f"slo: {saved.name}"[:300],
                     details={"changed": sorted(form.changed_data)})
        messages.success(request, f"SLO \"{saved.name}\" saved; scorecards follow at the next "
                                  "evaluation (or evaluate now).")
        return HttpResponseSeeOther(reverse("slo-list"))


class EvaluateView(ActionRequiredMixin, View):
    """Admins: evaluate every SLO now (queued; in-process without a broker)."""

    required_action = ADMIN
    write_action = ADMIN
    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        from apps.slo.tasks import evaluate_slos

        evaluate_slos.delay_on_commit()
        messages.success(request, "SLO evaluation started.")
        return HttpResponseSeeOther(reverse("slo-list"))
