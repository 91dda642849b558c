"""Import layers (docs/ARCHITECTURE.md), checked on the AST as test_purity.py checks purity.

- ``apps/core`` is the floor: it imports no domain app (only ``apps/analysis``, pure Python
  below every app, which test_purity.py checks);
- views and API modules reach the outside world through services, never an adapter;
- ``apps/demo`` and ``apps/shell`` are the top layer: no domain app imports them;
- a run is recorded (``apps.core.runs.tracked_run``) by services only: tasks, commands,
  views and the API call a service that records itself, and never wrap it again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.analysis.test_purity import _imports

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "apps"
TOP = ("demo", "shell")
DOMAIN = sorted(p.name for p in APPS.iterdir()
                if (p / "apps.py").exists() and p.name not in ("core", *TOP))


def _files(*folders: Path) -> list[Path]:
    return [p for folder in folders for p in sorted(folder.rglob("*.py"))
            if "migrations" not in p.parts]


def _app_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "apps" and len(parts) > 1 else None


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", _files(APPS / "core"), ids=_rel)
def test_core_imports_no_domain_app(path):
    bad = [n for n in _imports(path) if _app_of(n) not in (None, "core", "analysis")]
    assert not bad, f"{_rel(path)} imports {bad}: apps/core is the floor"


def _views_and_api() -> list[Path]:
    packages = sorted(APPS.glob("*/views")) + sorted(APPS.glob("*/api"))
    return sorted(APPS.glob("*/views.py")) + _files(*packages)


@pytest.mark.parametrize("path", _views_and_api(), ids=_rel)
def test_views_and_api_import_no_adapter(path):
    bad = [n for n in _imports(path) if ".adapters" in n]
    assert not bad, f"{_rel(path)} imports {bad}: go through a service"


@pytest.mark.parametrize("path", _files(*(APPS / app for app in ("core", *DOMAIN))), ids=_rel)
def test_no_domain_app_imports_the_top_layer(path):
    bad = [n for n in _imports(path) if _app_of(n) in TOP]
    assert not bad, f"{_rel(path)} imports {bad}: apps/demo and apps/shell are the top layer"


def _callers_of_services() -> list[Path]:
    """Tasks, management commands, views and API modules: thin layers over the services."""
    thin = [*APPS.glob("*/tasks.py"), *APPS.glob("*/management/commands/*.py")]
    return sorted(thin) + _views_and_api()


def _names(path: Path) -> list[str]:
    """Every imported module and ``module.name`` (``from apps.core import runs`` too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


@pytest.mark.parametrize("path", _callers_of_services(), ids=_rel)
def test_only_services_record_runs(path):
    bad = [n for n in _names(path) if n.startswith("apps.core.runs")]
    assert not bad, f"{_rel(path)} imports {bad}: call the service, which records the run"


def test_the_layers_know_the_apps():
    """A new app is a domain app unless it is listed in TOP; the lists are not empty."""
    assert {"clusters", "jobs", "accounts"} <= set(DOMAIN)
    assert all((APPS / app / "apps.py").exists() for app in TOP)
    assert any(p.name == "tasks.py" for p in _callers_of_services())


def test_the_guards_catch_what_they_refuse(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from apps.clusters.adapters.slurm import SlurmJob\nimport apps.demo.loader\n"
                   "from apps.core.errors import AdapterError\n")
    names = _imports(bad)
    assert [_app_of(n) for n in names] == ["clusters", "demo", "core"]
    assert [n for n in names if ".adapters" in n] == ["apps.clusters.adapters.slurm"]
    bad.write_text("from apps.core import runs\nfrom apps.core.runs import tracked_run\n")
    assert [n for n in _names(bad) if n.startswith("apps.core.runs")] == [
        "apps.core.runs", "apps.core.runs", "apps.core.runs.tracked_run"]
