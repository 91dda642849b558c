"""A straggler with no hardware evidence is "the slowest stage" (issue 28): the shipped
``straggler-no-hardware`` rule's words, revised where the admins left them as shipped."""

import importlib

from django.db import migrations

OLD_TITLE = "One GPU does more work than the others"
OLD_TEXT = ("GPU {straggler_gpu} made {waiting_gpu_count} GPUs wait (about "
            "{straggler_slowdown} more work per step) with no sign of a hardware problem.")


def forwards(apps, schema_editor):
    from apps.jobs.diagnosis_defaults import DEFAULT_RULES

    spec = next(s for s in DEFAULT_RULES if s["key"] == "straggler-no-hardware")
    importlib.import_module("apps.jobs.migrations.0020_gpudirect_receive").revise(
        apps, "straggler-no-hardware",
        {"title": (OLD_TITLE, spec["title"]), "text": (OLD_TEXT, spec["text"])})


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0020_gpudirect_receive'),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
