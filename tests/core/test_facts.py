"""Figures marked as facts (issue 26, ``apps/core/facts.py``): printed through the fact's one
function, wrapped with what the persona walk compares."""

from __future__ import annotations

from datetime import UTC, date, datetime
from types import SimpleNamespace

import pytest

from apps.core.facts import fact_html, fact_within, subject_of

JOB = SimpleNamespace(job_id=123, cluster=SimpleNamespace(name="hpc"))
TEAM = SimpleNamespace(slug="nlp")


def test_a_figure_is_printed_by_its_fact_and_wrapped_with_its_subject():
    html = fact_html("job-gpu-hours", JOB, 1500.94)
    assert html == ('<span data-fact="job-gpu-hours" data-subject="job:hpc/123" '
                    'data-value="1,500.9 GPU-h">1,500.9 GPU-h</span>')


def test_a_bare_figure_keeps_its_unit_in_the_value_and_a_snapshot_its_moment():
    html = fact_html("team-month-gpu-hours", TEAM, 75.84, bare=True, month=date(2026, 11, 1),
                     at=datetime(2026, 11, 2, 6, tzinfo=UTC))
    assert 'data-subject="team:nlp/2026-11"' in html and 'data-value="75.8 GPU-h"' in html
    assert 'data-at="2026-11-02T06:00:00+00:00">75.8</span>' in html


@pytest.mark.parametrize(("name", "value", "text"), [
    ("job-idle-share", 0.92, "92%"), ("job-memory-peak", 344 * 1024**3, "344.0 GiB"),
])
def test_each_fact_prints_as_every_page_prints_it(name, value, text):
    assert f'data-value="{text}">{text}</span>' in fact_html(name, JOB, value)


def test_an_unknown_value_or_subject_is_not_marked():
    assert fact_html("job-gpu-hours", JOB, None) == "—"
    assert fact_html("job-gpu-hours", JOB, "") == "—"  # a template's missing key
    assert fact_html("job-gpu-hours", None, 2.0) == "2.0 GPU-h"


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="unknown fact 'job-hours'"):
        fact_html("job-hours", JOB, 1.0)
    with pytest.raises(ValueError, match="a job, a team or a string"):
        subject_of(42)
    with pytest.raises(ValueError, match="needs a subject"):
        subject_of("")


def test_a_stored_sentence_gets_its_figure_marked_past_the_anchor_and_escaped():
    text = "<b>busy 92% of 4.0 h, idle with GPU memory held 92% of it"
    html = fact_within(text, "job-idle-share", JOB, 0.92, after="memory held ")
    assert html.startswith("&lt;b&gt;busy 92% of 4.0 h, idle with GPU memory held <span ")
    assert 'data-value="92%">92%</span> of it' in html
    # a sentence that does not state the figure is left as it is
    assert fact_within(text, "job-idle-share", JOB, 0.5) == "&lt;b&gt;" + text[3:]
    assert "data-fact" not in fact_within(text, "job-idle-share", JOB, None)
