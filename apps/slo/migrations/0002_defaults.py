from django.db import migrations


def _seed(apps, schema_editor):
    from apps.slo.defaults import seed

    seed(apps)


class Migration(migrations.Migration):

    dependencies = [("slo", "0001_slo")]

    operations = [migrations.RunPython(_seed, migrations.RunPython.noop)]
