"""The demo and its evaluation: the top layer, free to import every domain app.

Nothing below imports it (tests/analysis/test_layers.py): ``load_demo`` runs the real
importers over a simulator folder, and ``verdict_report`` / ``detection_report`` compare
what they stored with the simulator's ground truth.
"""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "apps.demo"
    label = "demo"
