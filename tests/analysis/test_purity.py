"""apps/analysis (and the simulator) stay pure: no Django, no other apps, no I/O frameworks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_PACKAGES = ["apps/analysis", "apps/simulator"]
ALLOWED_APPS_PREFIX = "apps.analysis"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _pure_files() -> list[Path]:
    return [p for pkg in PURE_PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_packages_import_no_django_and_no_other_app(path):
    bad = [n for n in _imports(path)
           if n.split(".")[0] in ("django", "rest_framework", "celery")
           or (n.startswith("apps.") and not n.startswith(ALLOWED_APPS_PREFIX)
               and not n.startswith("apps.simulator"))]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_the_guard_catches_a_django_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from django.db import models\nimport apps.jobs.models\n")
    assert _imports(bad) == ["django.db", "apps.jobs.models"]
