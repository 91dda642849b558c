"""The archive's per-GPU and per-node rows get a ``month`` and, on PostgreSQL, monthly
partitions (issue 29; apps/jobs/partitions.py). SQLite keeps plain tables."""

from django.db import migrations, models

import apps.jobs.models.archive

TABLES = ("jobs_jobmetricsummary", "jobs_jobnodemetrics")
MONTH = {
    "postgresql": "date_trunc('month', COALESCE(j.end_time, j.submit_time) AT TIME ZONE 'UTC')::date",
    "sqlite": "date(COALESCE(j.end_time, j.submit_time), 'start of month')",
}


def fill_month(apps, schema_editor):
    """Each row's month from its job: the end month, the submit month while it runs."""
    expression = MONTH.get(schema_editor.connection.vendor)
    if expression is None:
        raise RuntimeError(f"no month expression for {schema_editor.connection.vendor}")
    for table in TABLES:
        schema_editor.execute(
            f'UPDATE "{table}" SET month = (SELECT {expression} FROM jobs_job j '
            f'WHERE j.id = "{table}".job_id)')


def partition(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from apps.jobs.partitions import convert

        convert(schema_editor)


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from apps.jobs.partitions import revert

        revert(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0024_roofline_pipes'),
    ]

    operations = [
        migrations.RemoveConstraint(model_name='jobmetricsummary', name='jobmetricsummary_unique'),
        migrations.RemoveConstraint(model_name='jobnodemetrics', name='jobnodemetrics_unique'),
        migrations.AddField(
            model_name='jobmetricsummary',
            name='month',
            field=apps.jobs.models.archive.ArchiveMonthField(
                null=True, help_text="partition key: the job's end month (submit month while it runs)"),
        ),
        migrations.AddField(
            model_name='jobnodemetrics',
            name='month',
            field=apps.jobs.models.archive.ArchiveMonthField(
                null=True, help_text="partition key: the job's end month (submit month while it runs)"),
        ),
        migrations.RunPython(fill_month, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='jobmetricsummary',
            name='month',
            field=apps.jobs.models.archive.ArchiveMonthField(
                help_text="partition key: the job's end month (submit month while it runs)"),
        ),
        migrations.AlterField(
            model_name='jobnodemetrics',
            name='month',
            field=apps.jobs.models.archive.ArchiveMonthField(
                help_text="partition key: the job's end month (submit month while it runs)"),
        ),
        migrations.AddConstraint(
            model_name='jobmetricsummary',
            constraint=models.UniqueConstraint(
                fields=('job', 'host', 'gpu_index', 'month'), name='jobmetricsummary_unique'),
        ),
        migrations.AddConstraint(
            model_name='jobnodemetrics',
            constraint=models.UniqueConstraint(
                fields=('job', 'host', 'month'), name='jobnodemetrics_unique'),
        ),
        migrations.RunPython(partition, unpartition),
    ]
