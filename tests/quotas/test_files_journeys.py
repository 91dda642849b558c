"""The demo's ``files`` backend does the admin's quota and reconciliation journeys (issue 19):
previews read the saved ``sacctmgr`` limits, an apply writes a simulated accounting state that
the same backend reads back, an outside change shows as drift, and reconciliation reads the
``sreport`` and ``sacct -T`` output the simulator saved. Backends that cannot do an action
say so on the page before the button is pressed."""

from __future__ import annotations

import io
import shutil
from datetime import date
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.chargeback import reconciliation
from apps.clusters import services as cluster_services
from apps.clusters.adapters.slurm.files import STATE, SlurmFiles
from apps.clusters.adapters.slurm.parse_cluster import (
    parse_sacct_allocations,
    parse_sreport_usage,
)
from apps.clusters.adapters.slurm.types import Action
from apps.clusters.models import Cluster, SlurmAccount, SlurmAssociation
from apps.core.errors import AdapterError
from apps.demo import loader as demo
from apps.quotas import services
from apps.quotas.models import Quota, QuotaChange

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
MONTH = date(2026, 10, 1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes x 3 days without telemetry, ending 2026-10-20 00:00 UTC."""
    out = tmp_path_factory.mktemp("journeys")
    call_command("simulate", out=str(out), nodes=4, days=3, seed=7, now="2026-10-20T00:00:00Z",
                 telemetry_days=0, cluster="journeys", stdout=io.StringIO())
    return out


@pytest.fixture
def loaded(folder: Path, tmp_path: Path) -> Cluster:
    copy = tmp_path / "demo"
    shutil.copytree(folder, copy)
    demo.load(copy)
    return Cluster.objects.get(name="journeys")


@pytest.fixture
def admin(django_user_model, client):
    client.force_login(django_user_model.objects.create_user("root", is_staff=True))
    return client


def test_the_simulator_saves_sreport_and_sacct_windows_as_slurm_prints_them(folder):
    slurm = folder / "slurm"
    report = slurm / "sreport_20261001T000000_20261019T230000.txt"
    jobs = slurm / "sacct_alloc_20261001T000000_20261019T230000.txt"
    recorded = (FIXTURES / "sreport_account_user.txt").read_text().splitlines()
    lines = report.read_text().splitlines()
    assert lines[0] == recorded[0] and lines[2:5] == recorded[2:5]  # banner, header
    assert lines[1] == ("Cluster/Account/User Utilization 2026-10-01T00:00:00 - "
                        "2026-10-19T22:59:59 (1638000 secs)")
    rows = parse_sreport_usage(report.read_text())
    accounts = {r.account: r.minutes for r in rows if not r.user}
    allocations = parse_sacct_allocations(jobs.read_text())
    assert len(allocations) > 20 and accounts["root"] > 0
    by_account: dict[str, float] = {}
    for a in allocations:
        by_account[a.account] = by_account.get(a.account, 0) + a.gpus * a.elapsed_s / 60
    for account, minutes in accounts.items():
        if account != "root":
            assert abs(minutes - by_account.get(account, 0)) <= 0.5, account
            users = sum(r.minutes for r in rows if r.account == account and r.user)
            assert abs(users - minutes) <= len(rows)  # each line rounded on its own


def test_the_demo_reconciles_against_the_saved_reports_and_agrees(loaded):
    row = reconciliation.reconcile_month(loaded, MONTH)
    assert f"{row.window_end:%Y-%m-%d %H:%M}" == "2026-10-19 23:00"  # the saved window
    assert row.accounts and sum(a["report_minutes"] or 0 for a in row.accounts) > 0
    assert row.ok, [a for a in row.accounts if not a["ok"]]
    assert row.jobs == []
    with pytest.raises(reconciliation.ReconcileError, match="saved Slurm accounting ends"):
        reconciliation.reconcile_month(loaded, date(2026, 11, 1))


def test_preview_apply_read_back_audit_and_drift_on_the_simulated_slurm(loaded):
    account = SlurmAccount.objects.get(cluster=loaded, name="robotics")
    saved = SlurmAssociation.objects.get(cluster=loaded, account="robotics", user_name="")
    held = saved.grp_tres_mins["gres/gpu"]
    month = reconciliation.timezone.now().date().replace(day=1)
    preview = services.preview(account, month, held + 6000)
    assert preview.old_minutes == held and preview.command.startswith("sacctmgr -i modify")
    assert "[simulated]" in preview.slurm_output and "Changes Discarded" in preview.slurm_output
    assert not (Path(loaded.slurm_settings["dir"]) / STATE).exists()  # a preview writes nothing

    quota = services.apply(account, month, held + 6000, held, 0, "more GPUs for the demo", None)
    assert quota.state == Quota.State.APPLIED and quota.slurm_minutes == held + 6000
    client = cluster_services.client_for(loaded)
    assert client.account_limits("robotics").grp_tres_mins["gres/gpu"] == held + 6000
    change = QuotaChange.objects.get(kind=QuotaChange.Kind.SET)
    assert "[simulated]" in change.output
    assert AuditEvent.objects.filter(action=AuditEvent.Action.QUOTA).exists()

    text = services.simulate_outside_change(account)
    assert "1 new drift" in text
    quota.refresh_from_db()
    assert quota.drift and quota.slurm_minutes == held + 6600
    assert QuotaChange.objects.filter(kind=QuotaChange.Kind.DRIFT).count() == 1


def test_the_pages_show_the_simulated_journey_and_label_it(loaded, admin):
    account = SlurmAccount.objects.get(cluster=loaded, name="speech")
    url = reverse("quotas-edit", args=[account.pk])
    page = admin.get(url).content.decode()
    assert "simulated" in page and "Simulate a change outside the portal" in page
    preview = admin.post(url, {"step": "preview", "hours": "500", "reason": "demo"})
    assert preview.status_code == 200 and "write to the simulated Slurm" in preview.content.decode()
    done = admin.post(url, {"step": "apply", "hours": "500", "reason": "demo",
                            "month": f"{reconciliation.timezone.now():%Y-%m}",
                            "seen_minutes": preview.context["preview"].old_minutes or "",
                            "seen_version": 0})
    assert done.status_code == 303
    drift = admin.post(url, {"step": "outside_change"}, follow=True)
    assert drift.status_code == 200 and "Simulated:" in drift.content.decode()
    home = admin.get(reverse("chargeback-home") + "?month=2026-10").content.decode()
    assert "Reconcile 2026-10 now" in home and "sreport" in home


def test_a_backend_that_cannot_says_so_before_the_button_and_never_fails(db, tmp_path, admin):
    for name in ("sacct_window.json", "squeue.json", "sinfo.json", "sacctmgr_assoc.txt"):
        shutil.copy(FIXTURES / name, tmp_path / name.replace("_window", ""))
    saved = Cluster.objects.create(name="devcluster", slurm_backend="files",
                                   slurm_settings={"dir": str(tmp_path)})
    bare = Cluster.objects.create(name="importonly", slurm_backend="none")
    assert cluster_services.cannot(saved, Action.QUOTA_PREVIEW) == ""
    assert "cannot write to Slurm" in cluster_services.cannot(saved, Action.QUOTA_WRITE)
    assert "no saved sreport" in cluster_services.cannot(saved, Action.RECONCILE)
    assert "no Slurm backend" in cluster_services.cannot(bare, Action.QUOTA_PREVIEW)
    with pytest.raises(AdapterError, match="cannot write to Slurm"):
        SlurmFiles(tmp_path).set_account_limit("speech", "gres/gpu", 60)
    assert not (tmp_path / STATE).exists()

    from apps.accounts.models import Team
    team = Team.objects.create(slug="speech", name="Speech")
    files_account = SlurmAccount.objects.create(cluster=saved, name="speech", team=team)
    bare_account = SlurmAccount.objects.create(cluster=bare, name="speech", team=team)
    url = reverse("quotas-edit", args=[files_account.pk])
    page = admin.post(url, {"step": "preview", "hours": "5", "reason": "x"}).content.decode()
    assert "cannot be written from here" in page and "Confirm" not in page
    applied = admin.post(url, {"step": "apply", "hours": "5", "reason": "x", "seen_minutes": "20",
                               "seen_version": "0"})
    assert applied.status_code == 200 and "Not applied" in applied.content.decode()
    assert not Quota.objects.filter(state=Quota.State.APPLIED).exists()
    page = admin.get(reverse("quotas-edit", args=[bare_account.pk])).content.decode()
    assert "cannot be previewed or set here" in page and "Preview</button>" not in page
    home = admin.get(reverse("chargeback-home")).content.decode()
    assert "cannot be reconciled" in home
    refused = admin.post(reverse("chargeback-reconcile"), {"cluster": "devcluster",
                                                          "month": "2026-11"})
    assert refused.status_code in (302, 303)
