#!/usr/bin/env python
"""Django's command-line utility, with one-line errors for configuration and database faults.

``analyze_trace`` runs before Django starts (apps/jobs/trace_command.py): it needs neither
settings nor the database, and Django's start-up would cost more than most analyses.
"""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["analyze_trace"]:
        from apps.jobs.trace_command import main as analyze_trace

        sys.exit(analyze_trace(sys.argv[2:]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.exceptions import ImproperlyConfigured

    try:
        from django.core.management import execute_from_command_line
        from django.db.utils import OperationalError

        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad environment value: name it, no traceback.
        sys.exit(f"beacon: configuration error: {exc}")
    except OperationalError as exc:
        # A missing or unreachable database: one clear line instead of a traceback.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.exit(f"beacon: database unavailable: {first}")


if __name__ == "__main__":
    main()
