"""The rows of every job table (``partials/job_table.html``), built in Python.

A row has some 30 template lookups and filters; through the template engine they were
about a third of the job list's CPU time per request (issue 6: p95 < 100 ms over 1M jobs
at 20 clients on 2 cores). As in Django's own admin change list
(``admin_list.items_for_result``), the cells are made here. Every value from the database
passes through ``_e`` (``html.escape``, which Django's ``escape`` also is): job names and
users are hostile input (tests/jobs/test_job_list.py).
"""

from __future__ import annotations

from html import escape
from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from apps.analysis.figures import gpu_hours_text, share_text
from apps.core.facts import fact_html
from apps.core.templatetags.portal import band, duration, gpus
from apps.jobs.presenters import list_figures_at, list_idleness

register = template.Library()
SIM_TAG = ' <span class="tag tag-sim" title="simulated">sim</span>'


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


@register.simple_tag(takes_context=True)
def job_rows(context: template.Context, jobs: Any, empty_text: str = "") -> SafeString:
    """``<tr>`` per job; the context's ``arrays`` (grouped lists), ``scope`` and
    ``with_efficiency`` (the Computing and Findings columns) shape them."""
    arrays = context.get("arrays") or {}
    scope = context.get("scope") or "mine"
    efficiency = bool(context.get("with_efficiency"))
    urls = _DetailUrls()
    pick = bool(context.get("with_compare"))  # a tick box per row, for the form around it
    rows = [_row(job, arrays, scope, efficiency, urls, pick) for job in jobs]
    if not rows:
        rows = [f'<tr><td colspan="13" class="muted">{_e(empty_text or "No jobs.")}</td></tr>']
    return mark_safe("\n".join(rows))  # noqa: S308  (every value inside went through _e)


class _DetailUrls:
    """``jobs-detail`` URLs, reversed once per cluster rather than once per row (a reverse
    costs about 20 µs): the job id is put where ``reverse`` put a marker id."""

    MARKER = 987_654_321_987_654

    def __init__(self) -> None:
        self.parts: dict[str, tuple[str, str]] = {}

    def __call__(self, cluster: str, job_id: int) -> str:
        if cluster not in self.parts:
            url = reverse("jobs-detail", args=[cluster, self.MARKER])
            head, _, tail = url.rpartition(str(self.MARKER))  # the id comes last in the path
            self.parts[cluster] = (_e(head), _e(tail))
        head, tail = self.parts[cluster]
        return f"{head}{int(job_id)}{tail}"


def _row(job: Any, arrays: dict[Any, Any], scope: str, efficiency: bool,
         urls: _DetailUrls, pick: bool = False) -> str:
    url = urls(job.cluster.name, job.job_id)
    array = arrays.get((job.cluster_id, job.array_job_id)) if job.array_job_id else None
    label = f"{job.array_job_id}_[…]" if array else _e(job.display_id)
    first = f'<td><a href="{url}">{label}</a>{SIM_TAG if job.cluster.is_simulated else ""}'
    task = ""
    if array:
        first += _array_summary(job, array, scope)
        task = f' <span class="small muted">(task {_e(job.array_task_id)})</span>'
    name = _e(job.name)
    team = (job.team.slug if job.team_id else "") or job.account
    extra = _efficiency_cells(job, url) if efficiency else ""
    submitted = timezone.localtime(job.submit_time) if timezone.is_aware(job.submit_time) \
        else job.submit_time
    return (f'<tr>{_pick(job) if pick else ""}{first}</td>'
            f'<td class="truncate" title="{name}">{name}</td>'
            f"<td>{_e(job.user_name)}</td><td>{_e(team)}</td><td>{_e(job.partition)}</td>"
            f'<td><span class="state state-{_e(job.state.lower())}">{_e(job.state)}</span>'
            f'{task}</td><td class="num">{gpus(job.gpu_equivalent)}</td>'
            f'<td class="num">{_gpu_hours(job)}</td>{extra}'
            f'<td>{submitted.strftime("%Y-%m-%d %H:%M")}</td>'
            f'<td class="num">{duration(job.queue_wait)}</td>'
            f'<td class="num">{duration(job.run_time)}</td></tr>')


def _pick(job: Any) -> str:
    """The row's tick box: ``ids=<cluster>/<job id>``, what the comparison page reads."""
    ref = _e(f"{job.cluster.name}/{job.job_id}")
    return (f'<td><input type="checkbox" name="ids" value="{ref}" '
            f'aria-label="compare job {ref}"></td>')


def _gpu_hours(job: Any) -> str:
    """The job's GPU-hours as its page's header states them (none until it starts)."""
    if job.start_time is None:
        return '<span class="muted">—</span>'
    return fact_html("job-gpu-hours", job, job.gpu_hours, bare=True)


def _array_summary(job: Any, array: dict[str, Any], scope: str) -> str:
    states = " · ".join(f"{n} {_e(state.lower())}" for state, n in array["states"])
    return (f'<div class="array-summary"><a href="?q={job.array_job_id}&amp;group=tasks&amp;'
            f'scope={_e(scope)}">array of {array["tasks"]} tasks</a>: {states} · '
            f'{gpu_hours_text(array["gpu_hours"])}</div>')


def _idle_tag(job: Any, reading: Any) -> str:
    """The flagged reading's badge; with memory held, its share, as the job page says it."""
    held = fact_html("job-idle-share", job, reading.held, at=list_figures_at(job)) \
        if reading.memory_held else ""
    return (f' <span class="tag tag-idle" title="{_e(reading.summary)}">{_e(reading.title)}'
            f'{" " if held else ""}{held}</span>')


def _efficiency_cells(job: Any, url: str) -> str:
    """The Computing cell (the efficiency band) and the Diagnosis cell (a badge). "Finding"
    is the security pages' word (issue 26): here it is what the diagnosis rules found."""
    useful = getattr(job, "useful", None)
    if useful is None:
        cell = '<td class="num"><span class="muted">—</span></td>'
    else:
        reading = list_idleness(job)
        tag = _idle_tag(job, reading) if reading is not None and reading.flagged else ""
        cell = (f'<td class="num"><span class="band band-{band(useful)}">'
                f"{share_text(useful)}</span>{tag}</td>")
    count = getattr(job, "finding_count", None) or 0
    if not count:
        return cell + "<td></td>"
    return (cell + f'<td><a class="tag tag-bad" href="{url}#diagnosis">{count} '
            f'diagnos{"is" if count == 1 else "es"}</a></td>')
