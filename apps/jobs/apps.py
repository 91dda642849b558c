"""Jobs: the Slurm job records, GPU bindings, and the job pages."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
