"""load_demo: bad folders get a clear error and store nothing; the demo cluster has Slurm's
associations and fairshare (what the quota pages read); pages say when data is simulated."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse

from apps.clusters.adapters.slurm.parse_cluster import parse_sacctmgr_assoc
from apps.clusters.models import Cluster, SlurmAccount, SlurmAssociation
from apps.demo import loader as demo
from apps.quotas import services as quotas
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes x 3 days without telemetry: every Slurm file, and quick to load."""
    out = tmp_path_factory.mktemp("coredemo")
    call_command("simulate", out=str(out), nodes=4, days=3, seed=7, now="2026-10-20T00:00:00Z",
                 telemetry_days=0, cluster="coredemo", stdout=io.StringIO())
    return out


@pytest.fixture
def copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(folder, target)
    return target


# --- Bad folders -------------------------------------------------------------------------


def test_a_folder_without_sacct_json_is_refused_before_anything_is_stored(copy):
    (copy / "slurm" / "sacct.json").unlink()
    with pytest.raises(CommandError, match=r"missing slurm/sacct\.json; simulate again"):
        call_command("load_demo", str(copy), stdout=io.StringIO())
    assert not Cluster.objects.exists() and not User.objects.exists()


def test_an_unreadable_slurm_file_is_a_command_error_not_a_traceback(copy):
    (copy / "slurm" / "sinfo.json").write_text("{not json")
    with pytest.raises(CommandError, match=r"cannot load .*sinfo\.json: not JSON.*Simulate it"):
        call_command("load_demo", str(copy), stdout=io.StringIO())


def test_the_demo_command_passes_the_error_on(copy):
    (copy / "slurm" / "squeue.json").write_text("[]")
    with pytest.raises(CommandError, match=r"squeue\.json: expected a JSON object"):
        call_command("demo", "--out", str(copy), stdout=io.StringIO())


# --- Associations and fairshare ---------------------------------------------------------


def test_the_demo_cluster_has_fairshare_and_the_quota_pages_slurm_limits(folder, client):
    loaded = demo.load(folder)
    cluster = Cluster.objects.get(name="coredemo")
    assert loaded.stages["shares"]["associations"] == SlurmAssociation.objects.count() > 0
    assert cluster.shares_synced_at is not None
    users = SlurmAssociation.objects.filter(cluster=cluster).exclude(user_name="")
    teams = demo.describe(folder)["teams"]
    assert users.exclude(account="root").count() == sum(1 + len(t["members"]) for t in teams)
    assert not users.exclude(account="root").filter(fairshare__isnull=True).exists()
    assert SlurmAssociation.objects.filter(user_name="", raw_usage__gt=0).count() >= 3
    # the quota page reads Slurm's GrpTRESMins and decayed usage from these rows
    written = {a.account: a.grp_tres_mins["gres/gpu"] for a in parse_sacctmgr_assoc(
        (folder / "slurm" / "sacctmgr_assoc.txt").read_text()) if a.grp_tres_mins}
    rows = {r.account.name: r for r in quotas.usage_for(SlurmAccount.objects.filter(
        cluster=cluster))}
    assert {n for n, r in rows.items() if r.slurm_minutes is not None} == set(written)
    for name, minutes in written.items():
        assert rows[name].slurm_minutes == minutes and rows[name].used_hours > 0
        assert rows[name].status is not None
    client.force_login(User.objects.get(username="admin"))
    page = client.get(reverse("quotas-home")).content.decode()
    assert page.count("set in Slurm:") == len(written)
    # the cluster page lists the accounts' fairshare and limits
    page = client.get(reverse("clusters-detail", args=["coredemo"])).content.decode()
    section = page.split("<h2>Accounts and fairshare</h2>")[1].split("</section>")[0]
    assert section.count("<tr><td>") == len(teams)
    for name, minutes in written.items():
        assert f"<tr><td>{name}</td>" in section and f">{minutes // 60}</td>" in section
    assert demo.load(folder).stages["shares"]["associations"] == loaded.stages["shares"][
        "associations"]  # loading again replaces, never adds


# --- The simulated-data banner ------------------------------------------------------------

BANNER = "<strong>Simulated data.</strong>"


@pytest.fixture
def clusters(db):
    real = Cluster.objects.create(name="real", display_name="Real")
    simulated = Cluster.objects.create(name="sim", display_name="Sim", is_simulated=True)
    return real, simulated


def _page(client, name: str) -> str:
    client.force_login(User.objects.create_user("viewer"))
    response = client.get(reverse("clusters-detail", args=[name]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_simulated_clusters_page_shows_the_banner(clusters, client):
    page = _page(client, "sim")
    assert BANNER in page and "Cluster\n  sim is generated by Beacon" in page


def test_a_real_clusters_page_does_not(clusters, client):
    assert BANNER not in _page(client, "real")


def test_pages_that_mix_clusters_show_it_while_a_simulated_one_exists(clusters, client):
    client.force_login(User.objects.create_user("viewer"))
    assert BANNER in client.get(reverse("clusters-list")).content.decode()
    Cluster.objects.filter(is_simulated=True).delete()
    assert BANNER not in client.get(reverse("clusters-list")).content.decode()


@pytest.mark.parametrize(("cluster", "shown"), [("sim", True), ("real", False)])
def test_a_job_page_shows_the_banner_only_for_a_simulated_job(clusters, client, cluster,
                                                             shown):
    owner = User.objects.create_user("owner")
    job = make_job(Cluster.objects.get(name=cluster), 4242, owner, None)
    client.force_login(owner)
    page = client.get(reverse("jobs-detail", args=[cluster, job.job_id])).content.decode()
    assert (BANNER in page) is shown


# --- The live cluster view (issue 30) ----------------------------------------------------


def test_the_demo_cluster_has_a_live_view_of_simulated_data(folder, client):
    import time_machine

    from apps.clusters.adapters.slurm import parse_live
    from apps.clusters.models import QosLimit, Reservation

    loaded = demo.load(folder)
    assert loaded.stages["limits"]["notes"] == {} and loaded.stages["limits"]["qos"] == 3
    written = parse_live.parse_reservations_text(
        (folder / "slurm" / "scontrol_reservations.txt").read_text())
    assert sorted(Reservation.objects.values_list("name", flat=True)) == sorted(
        r.name for r in written)
    assert QosLimit.objects.get(name="high").priority == 100
    client.force_login(User.objects.get(username="admin"))
    with time_machine.travel("2026-10-20T00:00:00Z", tick=False):
        page = client.get(reverse("clusters-live", args=["coredemo"])).content.decode()
    assert BANNER in page and 'data-live-every="0"' in page and "is simulated" in page
    grid = page.split('class="table gpu-grid"')[1].split("</table>")[0]
    assert grid.count('class="gpu gpu-') == sum(
        n.gpu_count for n in Cluster.objects.get(name="coredemo").nodes.all()) > 0
    for res in written:  # a node still out at now carries its maintenance reservation
        assert res.name in page
