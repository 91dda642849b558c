"""Every Slurm backend implements the whole adapter protocol (issue 19: the demo's ``files``
backend had no ``account_limits`` and the quota preview was a 500), checked twice: here by
signature, and by the type checker (the registry types each backend's factory as returning a
``SlurmClient``, so mypy refuses a backend missing a member on its registry entry)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from apps.clusters.adapters.slurm.cli import SlurmCli
from apps.clusters.adapters.slurm.files import SlurmFiles
from apps.clusters.adapters.slurm.pyslurm import SlurmPyslurm
from apps.clusters.adapters.slurm.rest import SlurmRest
from apps.clusters.adapters.slurm.types import Action, SlurmClient
from apps.clusters.models import Cluster
from tests.fake import FakeSlurm

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = {"cli": SlurmCli, "rest": SlurmRest, "pyslurm": SlurmPyslurm, "files": SlurmFiles}
MEMBERS = sorted(name for name, value in vars(SlurmClient).items()
                 if callable(value) and not name.startswith("_"))


def _parameters(fn: object) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


def test_the_protocol_is_what_the_portal_asks_for():
    assert {"jobs_since", "account_limits", "set_account_limit", "usage_report",
            "job_allocations", "cannot", "accounted_until"} <= set(MEMBERS)


def test_every_backend_choice_of_the_cluster_model_is_checked():
    choices = {c for c, _ in Cluster.SlurmBackend.choices} - {Cluster.SlurmBackend.NONE}
    assert choices == set(BACKENDS)


@pytest.mark.parametrize("backend", [*sorted(BACKENDS), "fake (unit tests)"])
def test_every_backend_implements_every_member_with_the_same_parameters(backend):
    cls = BACKENDS.get(backend, FakeSlurm)
    missing = [name for name in MEMBERS if not callable(getattr(cls, name, None))]
    assert missing == [], f"{backend} lacks {missing}"
    for name in MEMBERS:
        assert _parameters(getattr(cls, name)) == _parameters(getattr(SlurmClient, name)), \
            f"{backend}.{name} differs from the protocol"


def test_backends_that_cannot_do_an_action_say_why_before_it_is_tried(tmp_path):
    files = SlurmFiles(tmp_path)  # an empty folder of saved output
    rest = SlurmRest(url="http://127.0.0.1:1", user="beacon", token="t", version="v0.0.38")
    pyslurm = SlurmPyslurm()
    for client in (files, rest, pyslurm):
        for action in Action:
            if client in (rest, pyslurm) and action == Action.CANCEL:
                continue  # slurmrestd cancels (DELETE job), pyslurm with Job(id).cancel()
            reason = client.cannot(action)
            assert isinstance(reason, str) and len(reason) > 20, (client, action)
    assert rest.cannot(Action.CANCEL) == "" and pyslurm.cannot(Action.CANCEL) == ""
    # from Slurm 23.11 (v0.0.40) slurmrestd writes limits; no version has sreport
    modern = SlurmRest(url="http://127.0.0.1:1", user="beacon", token="t", version="v0.0.45")
    assert [a for a in Action if modern.cannot(a)] == [Action.RECONCILE]
    cli = SlurmCli()
    assert [cli.cannot(a) for a in Action] == ["", "", "", ""]


def test_the_type_checker_agrees():
    modules = ["apps/clusters/adapters/slurm/"]
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir=/dev/null", *modules],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
