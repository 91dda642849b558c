"""Job list indexes (issue 6, docs/joblist.md): one state within a scope, and name search.

The trigram index exists only on PostgreSQL (``pg_trgm`` ships in Debian's postgresql-15
contrib and is a trusted extension: a database owner may create it). Elsewhere (SQLite) the
operation does nothing and the search scans, which is fine at SQLite's sizes.
"""

from django.conf import settings
from django.db import migrations, models

TRGM_INDEX = "job_name_trgm"


def _add_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # Django's icontains on PostgreSQL is UPPER("name"::text) LIKE UPPER(%s): the index is
    # on that expression, so the planner also has statistics for it (ANALYZE).
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {TRGM_INDEX} ON jobs_job "
                          "USING gin (UPPER(name::text) gin_trgm_ops)")


def _drop_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {TRGM_INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0003_profile"),
        ("clusters", "0003_files_backend"),
        ("jobs", "0007_slo_inputs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["user", "state", "-submit_time", "-id"],
                               name="job_user_state_submit"),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["team", "state", "-submit_time", "-id"],
                               name="job_team_state_submit"),
        ),
        migrations.RunPython(_add_trigram_index, _drop_trigram_index),
    ]
