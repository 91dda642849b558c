"""What the PostgreSQL benchmarks over many jobs (chargeback, slo) set up alike: the schema,
and teams of users with one lead each. Their jobs differ (each bench writes its own by COPY)."""

from __future__ import annotations

from typing import Any

from bench.common import ensure_database


def migrate(db_url: str) -> None:
    """Migrate; a database left by another checkout's migrations is made anew."""
    from django.core.management import call_command
    from django.db import DatabaseError, connection

    try:
        call_command("migrate", verbosity=0)
    except DatabaseError:
        connection.close()
        ensure_database(db_url, fresh=True)
        call_command("migrate", verbosity=0)


def teams_and_users(teams: int, per_team: int) -> list[tuple[Any, Any]]:
    """``teams`` teams (team00, team01, ...) of ``per_team`` users, the first one its lead;
    (user, team) pairs in creation order."""
    from django.contrib.auth.models import User

    from apps.accounts.models import Membership, Team

    users = []
    for t in range(teams):
        team = Team.objects.create(slug=f"team{t:02d}", name=f"Team {t:02d}")
        for u in range(per_team):
            user = User.objects.create(username=f"u{t:02d}{u}")
            users.append((user, team))
            Membership.objects.create(user=user, team=team, role="lead" if u == 0 else "member")
    return users
