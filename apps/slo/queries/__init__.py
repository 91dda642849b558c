"""The SLIs in SQL: a few GROUP BYs per objective, never a loop over jobs.

Each function takes an objective's population (``population``), its window and the
trend's day edges, and returns plain numbers per subject (``team:<id>``, ``platform``,
``partition:<name>``) for ``apps.analysis.slo.assess``. They count exactly what the pure
reference (``apps.analysis.slo.event_counts``) counts job by job; tests/slo compares both,
and both with hand-written SQL.

- queue wait: jobs **started** in the window; own-limit waits apart (``pending.wait_cause``
  as SQL: ``OWN_REASONS`` and the ``Assoc``/``QOS`` prefixes);
- job success: jobs **ended** in the window, each ending classified by the first matching
  ``EndingRule`` in one SQL ``CASE``;
- GPU efficiency: GPU-seconds **prorated** to the window and to each trend day. Days come
  from one GROUP BY on (first day, last day) of each job's run inside the window: a job's
  seconds in its first day are ``first day's end - start``, in its last ``end - last day's
  start`` and full days in between, so three sums per group give every day exactly
  (``apps.core.sql.spread_sums`` sums them per day in an outer query).

Percentiles are nearest-rank (``apps.analysis.slo.percentile``, PostgreSQL's ``percentile_disc``)
over each breakdown cell's waits, fetched sorted (``SortedValues``; on SQLite an aggregate in
Python registered on each connection by ``apps.slo.apps``), so a subject's percentiles come
from its cells without a second sorted pass over the jobs.

| module | what |
|---|---|
| ``common`` | populations, subjects, day edges, the sorted-values aggregate, worst jobs |
| ``wait``, ``success``, ``efficiency`` | one SLI each |
"""

from apps.slo.queries.common import (
    WORST,
    Grouping,
    SortedValues,
    SqliteSorted,
    SubjectCounts,
    bucket_expression,
    by_subject,
    merge_counts,
    population,
    subject_expression,
    subject_key,
)
from apps.slo.queries.efficiency import gpu_efficiency, worst_efficiency
from apps.slo.queries.success import job_success, rule_q, worst_endings
from apps.slo.queries.wait import queue_wait, worst_waits

__all__ = [
    "WORST",
    "Grouping",
    "SortedValues",
    "SqliteSorted",
    "SubjectCounts",
    "bucket_expression",
    "by_subject",
    "gpu_efficiency",
    "job_success",
    "merge_counts",
    "population",
    "queue_wait",
    "rule_q",
    "subject_expression",
    "subject_key",
    "worst_efficiency",
    "worst_endings",
    "worst_waits",
]
