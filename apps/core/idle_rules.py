"""The site's idleness thresholds, from settings (apps/analysis/idleness.py reads them).

In ``apps/core`` so the system check (``core.E003``) and every domain app build them the
same way; ``apps/jobs/idleness.py`` is where pages and alerts get a job's reading.
"""

from __future__ import annotations

from django.conf import settings

from apps.analysis.idleness import IdleRules


def idle_rules() -> IdleRules:
    """``IDLE_BELOW_PERCENT``, ``MOSTLY_IDLE_BELOW_PERCENT``, ``MEMORY_HELD_MIB``,
    ``IDLE_HELD_PERCENT`` and ``IDLE_MIN_HOURS`` as one ``IdleRules`` (ValueError when they
    do not make one reading)."""
    return IdleRules(idle_below=settings.IDLE_BELOW_PERCENT / 100,
                     mostly_idle_below=settings.MOSTLY_IDLE_BELOW_PERCENT / 100,
                     memory_held_mib=float(settings.MEMORY_HELD_MIB),
                     held_share=settings.IDLE_HELD_PERCENT / 100,
                     min_hours=float(settings.IDLE_MIN_HOURS))
