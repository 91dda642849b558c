from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0008_telemetry_store'),
    ]

    operations = [
        migrations.AddField(
            model_name='cluster',
            name='simulated_now',
            field=models.DateTimeField(blank=True, help_text='A simulated cluster\'s "now": where its saved Slurm output and telemetry end (load_demo sets it); live passes over it (guardrails) run at this time', null=True),
        ),
    ]
