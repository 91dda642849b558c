"""Quotas against the REAL Slurm dev clusters (22.05, 24.11, 26.05), on an account of the
test's own, through the cli and the rest backend:

- a quota set through the portal (preview, then confirm) is what ``sacctmgr`` shows;
- a write Slurm refuses leaves nothing applied;
- a change made with sacctmgr behind the portal's back is detected as drift;
- jobs run until the quota is used up, and the next job waits with ``AssocGrpGRESMinutes``,
  which its page says in words.

What the rest backend cannot do on a release it must say before a button is pressed
(``cannot(...)``); the test checks that instead there. Start the clusters with
``sudo RELEASE=<r> bash deploy/dev/slurm.sh up``.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from apps.accounts.models import Membership, Team
from apps.analysis.figures import gpu_hours_text
from apps.chargeback.services import current_month
from apps.clusters import sync
from apps.clusters.adapters.slurm import Action
from apps.clusters.models import SlurmAccount
from apps.jobs.models import Job
from apps.quotas import services
from apps.quotas.models import Quota, QuotaChange
from tests.integration.slurm import SlurmDev, wait_for

pytestmark = [pytest.mark.integration("slurm"), pytest.mark.slow]

ACCOUNT, USER = "beacon-quota", "grace"  # no one else's jobs touch this account


def _sacctmgr_limit(slurm: SlurmDev) -> str:
    out = slurm.run("sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={ACCOUNT}",
                    f"cluster={slurm.cluster}", "format=user,grptresmins")
    return next(line.split("|")[1] for line in out.splitlines() if line.split("|")[0] == "")


def _used_minutes(slurm: SlurmDev) -> int:
    """Slurm's decayed GPU usage of the account (sshare GrpTRESRaw, whole minutes)."""
    out = slurm.run("sshare", "-n", "-P", "-A", ACCOUNT, "-o", "Account,User,GrpTRESRaw")
    row = next(line for line in out.splitlines() if line.split("|")[1] == "")
    tres = dict(item.split("=") for item in row.split("|")[2].split(","))
    return int(float(tres.get("gres/gpu", "0")))


@pytest.fixture(scope="module")
def slurm_account(slurm: SlurmDev) -> str:
    slurm.ensure_account(ACCOUNT, USER)
    slurm.run("sacctmgr", "-i", "modify", "account", "where", f"name={ACCOUNT}",
              f"cluster={slurm.cluster}", "set", "GrpTRESMins=gres/gpu=-1", "RawUsage=0")
    yield ACCOUNT
    slurm.run("sacctmgr", "-i", "modify", "account", "where", f"name={ACCOUNT}",
              f"cluster={slurm.cluster}", "set", "GrpTRESMins=gres/gpu=-1", check=False)


@pytest.fixture
def world(db, slurm, slurm_account, backend):
    cluster = slurm.new_cluster(backend)
    if backend == "rest" and slurm.release == "22.05":
        # slurmrestd 22.05 cannot rehearse or write a limit: the pages say so instead
        client = slurm.client("rest")
        assert "cli backend" in client.cannot(Action.QUOTA_WRITE)
        assert "cli backend" in client.cannot(Action.QUOTA_PREVIEW)
        return None  # (a skip would fail under CI=true): each test stops at ``if not world``
    team = Team.objects.create(slug="it-quota", name="Quota test team")
    account = SlurmAccount.objects.create(cluster=cluster, name=slurm_account, team=team)
    owner = User.objects.create_user(USER, password="pw")
    Membership.objects.create(user=owner, team=team, role="member")
    admin = User.objects.create_user("admin", password="pw", is_staff=True)
    return cluster, account, owner, admin


def _set(account: SlurmAccount, hours: str, admin: User) -> Quota:
    """What the page does: preview (Slurm's dry run), then confirm with what was shown."""
    month = current_month()
    # "" is a blank field on the page: no limit
    minutes = services.quota_minutes(account, month, Decimal(hours) if hours else None)
    shown = services.preview(account, month, minutes)
    if account.cluster.slurm_backend == "cli":
        assert shown.command.startswith("sacctmgr -i modify account where name=beacon-quota")
    return services.apply(account, month, minutes, shown.old_minutes, shown.version,
                          "integration test", admin)


def test_a_quota_set_through_the_portal_is_what_sacctmgr_shows(slurm, world):
    if not world:
        return  # slurmrestd 22.05: the refusal was checked in ``world``
    _, account, _, admin = world
    quota = _set(account, "1.5", admin)
    assert (quota.gpu_minutes, quota.state) == (90, "applied")
    assert _sacctmgr_limit(slurm) == "gres/gpu=90"
    _set(account, "", admin)  # no limit: -1
    assert _sacctmgr_limit(slurm) == ""
    assert list(QuotaChange.objects.values_list("kind", flat=True)) == ["set", "set"]


def test_a_write_slurm_refuses_leaves_nothing_applied(world):
    if not world:
        return  # slurmrestd 22.05: the refusal was checked in ``world``
    cluster, _, _, admin = world
    ghost = SlurmAccount.objects.create(cluster=cluster, name="beacon-no-such-account",
                                        team=Team.objects.get(slug="it-quota"))
    with pytest.raises(services.QuotaError, match="Slurm has no account"):
        services.apply(ghost, current_month(), 600, None, 0, "integration test", admin)
    assert not Quota.objects.filter(account=ghost).exists()
    assert QuotaChange.objects.get(account=ghost).kind == "failed"


def test_a_change_behind_the_portals_back_is_drift(slurm, world):
    if not world:
        return  # slurmrestd 22.05: the refusal was checked in ``world``
    cluster, account, _, admin = world
    _set(account, "2", admin)
    slurm.run("sacctmgr", "-i", "modify", "account", "where", f"name={ACCOUNT}",
              f"cluster={slurm.cluster}", "set", "GrpTRESMins=gres/gpu=777")
    assert services.check_cluster(cluster)["drift"] == 1
    quota = Quota.objects.get(account=account)
    assert (quota.drift, quota.slurm_minutes, quota.gpu_minutes) == (True, 777, 120)
    page = Client()
    page.force_login(admin)
    # 777 GPU-minutes, printed by the one GPU-hours function every page uses
    assert f"drift: Slurm holds {gpu_hours_text(777 / 60)}" in \
        page.get(reverse("quotas-home")).content.decode()


def test_jobs_use_up_the_quota_and_the_next_one_waits_saying_why(slurm, world):
    if not world:
        return  # slurmrestd 22.05: the refusal was checked in ``world``
    cluster, account, owner, admin = world
    used = _used_minutes(slurm)
    quota_minutes = 3 * math.ceil((used + 3) / 3)  # a multiple of 3 GPU-minutes: 0.05 GPU-h
    _set(account, str(Decimal(quota_minutes) / 60), admin)
    room = quota_minutes - used  # 3..5 GPU-minutes
    # one job as wide as the room, killed at its 1-minute limit: the quota is used up
    first = slurm.sbatch(USER, f"--account={ACCOUNT}", "--time=1", f"--gres=gpu:{room}",
                        "-J", "it-quota-fill", "--wrap", "sleep 90")
    wait_for(lambda: slurm.finished_in_accounting([first]), 150, "the filling job to end",
             every=2)
    wait_for(lambda: _used_minutes(slurm) >= quota_minutes - 1, 150,
             "Slurm to count the usage (PriorityCalcPeriod)", every=5)
    # it would have fitted an empty quota (2 <= room); now it must wait
    held = slurm.sbatch(USER, f"--account={ACCOUNT}", "--time=1", "--gres=gpu:2",
                       "-J", "it-quota-held", "--wrap", "sleep 5")
    try:
        wait_for(lambda: slurm.reason(held) == "AssocGrpGRESMinutes", 60,
                 "the next job to wait for the quota")
        # slurmdbd gets a pending job's record some seconds after slurmctld holds it
        wait_for(lambda: held in slurm.sacct_text([held]), 90, "the job in accounting",
                 every=2)
        sync.sync_cluster(cluster)
        sync.sync_queue(cluster)
        job = Job.objects.get(cluster=cluster, job_id=held)
        assert (job.state, job.reason, job.user) == ("PENDING", "AssocGrpGRESMinutes", owner)
        page = Client()
        page.force_login(owner)
        text = page.get(reverse("jobs-detail", args=[cluster.name, held])).content.decode()
        assert "your team&#x27;s GPU-hour quota is used up" in text
        services.check_cluster(cluster)
        [usage] = services.usage_for([account])  # the bar: Slurm's usage against the quota
        assert usage.status is not None and usage.used_hours * 60 >= quota_minutes - 1
        assert usage.status.remaining_hours * 60 < 2  # no room for the waiting 2-GPU-minute job
    finally:
        slurm.run("scancel", str(held), check=False)
