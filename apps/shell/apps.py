"""The site's shell: home and platform pages, run records, health, navigation, /metrics.

A small top-layer app: it reads several domain apps to draw the pages around them, and no
domain app imports it (tests/analysis/test_layers.py).
"""

from django.apps import AppConfig


class ShellConfig(AppConfig):
    name = "apps.shell"
    label = "shell"
