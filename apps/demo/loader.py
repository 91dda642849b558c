"""Load a simulator folder through Beacon's real import paths (the demo).

Nothing here writes jobs, metrics or traces itself: the folder is a Slurm ``files``
backend for the sync, a prolog history for ``import_gpu_map``, telemetry files for the
archive's ``OpenMetricsSource`` (and the guardrails' replay, ``apps/demo/guardrails.py``)
and trace folders for ``import_trace``. This module only
creates what a site's admin would set up by hand (the cluster row, teams, users,
contacts) and runs the importers in order. Every step is idempotent.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import transaction
from django.db.models import Min

from apps.accounts.models import Contact, Membership, Team
from apps.chargeback import services as billing
from apps.chargeback.models import Rate
from apps.clusters import labels, sync, sync_limits
from apps.clusters.models import Cluster, SlurmAccount
from apps.core.batch import fewer_collections
from apps.demo.guardrails import replay_guardrails
from apps.jobs import archive, traces
from apps.jobs.models import Job, JobMetrics, TraceRun
from apps.security.services import detect_simulated
from apps.slo import services as slo

Report = Callable[[str, int, int], None]  # stage, done, total
ADMIN = "admin"
# What the sync reads (sacctmgr_assoc.txt and sshare.txt are optional, as on a real site)
REQUIRED = ("slurm/sacct.json", "slurm/squeue.json", "slurm/sinfo.json",
            "slurm/scontrol_partitions.txt")
CONTACTS = [("data", "Storage team"), ("network", "Network team"),
            ("hardware", "Hardware on-call"), ("code", "ML platform help desk")]


class DemoError(Exception):
    """The folder is not a simulator output Beacon can load."""


@dataclass
class LoadResult:
    cluster: str = ""
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    logins: list[tuple[str, str, str]] = field(default_factory=list)


def describe(folder: Path) -> dict[str, Any]:
    """The simulator's ``cluster.json`` (teams, nodes, telemetry step)."""
    try:
        desc = json.loads((folder / "cluster.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DemoError(f"{folder}: no readable cluster.json; is this a simulator "
                        f"output folder? ({exc})") from exc
    if not desc.get("simulated") or not desc.get("name"):
        raise DemoError(f"{folder / 'cluster.json'}: not written by Beacon's simulator")
    return dict(desc)


def _check_complete(folder: Path) -> None:
    """Refuse a folder missing the Slurm files the sync reads, before anything is stored."""
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        raise DemoError(f"{folder}: incomplete simulator output, missing {', '.join(missing)}; "
                        f"simulate again (manage.py simulate --out {folder})")


def load(folder: Path, report: Report | None = None) -> LoadResult:
    """Import everything in ``folder``; safe to run again on the same folder."""
    report = report or (lambda stage, done, total: None)
    desc = describe(folder)
    _check_complete(folder)
    result = LoadResult(cluster=desc["name"])
    cluster = ensure_cluster(desc, folder)
    # PBKDF2 releases the GIL: the logins' hashes (~0.25 s each) are made on a thread while
    # the first stages, which use one core, run; they are stored once every stage is done
    with ThreadPoolExecutor(max_workers=1) as hasher:
        logins = ensure_people(cluster, desc, hasher)
        with fewer_collections():  # millions of short-lived telemetry tuples (batch.py)
            for stage, step in _steps(cluster, folder, report):
                started = time.perf_counter()
                stats = step()
                stats["seconds"] = round(time.perf_counter() - started, 1)
                result.stages[stage] = stats
        result.logins = logins.store()
    return result


def _steps(cluster: Cluster, folder: Path,
           report: Report) -> Iterator[tuple[str, Callable[[], dict[str, Any]]]]:
    yield "nodes", lambda: sync.sync_nodes(cluster)
    yield "shares", lambda: sync.sync_shares(cluster)  # sacctmgr associations + sshare
    yield "limits", lambda: sync_limits.sync_limits(cluster)  # reservations and QOS
    yield "jobs", lambda: sync.sync_cluster(cluster).stats()
    yield "queue", lambda: sync.sync_queue(cluster).stats()
    yield "gpu history", lambda: _gpu_history(cluster, folder / "slurm" / "gpu-map.log")
    yield "labels", lambda: _label_all(cluster)
    # the simulated "now": running jobs' snapshots then end where the telemetry ends, and a
    # second load computes exactly the same rows (idempotent)
    now = datetime.fromtimestamp(int(describe(folder)["now"]), tz=UTC)
    yield "archive", lambda: archive_telemetry(cluster, folder / "telemetry", report, now)
    yield "traces", lambda: import_traces(cluster, folder / "traces", report)
    yield "security", lambda: detect_simulated(cluster, folder, now)
    # what the guardrails' beat would have said (it skips simulated clusters), marked simulated
    step = float(cluster.metric_labels.get("scrape_interval") or 600)
    yield "guardrails", lambda: replay_guardrails(cluster, folder / "telemetry", now, step)
    yield "chargeback", lambda: chargeback(cluster, now)
    yield "slo", lambda: evaluate_slos(now)


# --- Set-up an admin would do ------------------------------------------------------------


def ensure_cluster(desc: dict[str, Any], folder: Path) -> Cluster:
    """The cluster row: simulated, its Slurm as the folder's saved output."""
    step = int(desc.get("telemetry", {}).get("step") or 30)
    models = {n["gpu_type"]: n["model"] for n in desc.get("nodes", [])}
    # the exporters its nodes run: an MI300X partition adds AMD's (a mixed cluster)
    exporters = sorted({n.get("exporter", "dcgm") for n in desc.get("nodes", [])},
                       key=("dcgm", "amd").index)
    labels: dict[str, Any] = {"scrape_interval": step}
    if exporters != ["dcgm"]:
        labels["exporters"] = exporters
    cluster, _ = Cluster.objects.update_or_create(name=desc["name"], defaults={
        "display_name": f"{desc['name']} (simulated)", "is_simulated": True,
        # the saved moment: make demo-full's live guardrails pass runs at it (issue 29)
        "simulated_now": datetime.fromtimestamp(int(desc["now"]), tz=UTC),
        "slurm_backend": Cluster.SlurmBackend.FILES,
        "slurm_settings": {"dir": str((folder / "slurm").resolve())},
        "metric_labels": labels,
        "gpu_types": [{"name": t, "model": m} for t, m in sorted(models.items())],
    })
    return cluster


def ensure_people(cluster: Cluster, desc: dict[str, Any],
                  hasher: Executor | None = None) -> PendingLogins:
    """Teams from the Slurm accounts, their leads and members, an admin, and contacts.

    Users get random passwords once; they are kept (mode 0600) in the data folder and
    printed by the command, never stored in git or in the folder. The passwords are hashed
    on ``hasher`` (here when None); ``store()`` on the result sets them and returns the
    logins.
    """
    rows = [(ADMIN, "platform admin")]
    with transaction.atomic():
        for team_desc in desc.get("teams", []):
            team = _team(cluster, team_desc)
            rows.append((team_desc["lead"], f"lead of {team.slug}"))
            rows += [(m, f"member of {team.slug}") for m in team_desc["members"]
                     if m != team_desc["lead"]]
        for area, name in CONTACTS:
            Contact.objects.get_or_create(area=area, name=name,
                                          defaults={"email": f"{area}@example.org"})
        pending = _logins(rows, hasher)
        _memberships(desc)
    return pending


def _team(cluster: Cluster, team_desc: dict[str, Any]) -> Team:
    slug = team_desc["account"]
    team, _ = Team.objects.update_or_create(slug=slug, defaults={
        "name": team_desc.get("description") or slug.title()})
    SlurmAccount.objects.update_or_create(cluster=cluster, name=slug, defaults={"team": team})
    return team


@dataclass
class PendingLogins:
    """The demo's users, their passwords, and the hashes being made for the new ones."""

    users: dict[str, Any]
    passwords: dict[str, str]
    roles: dict[str, str]
    hashes: dict[str, Future[str]]

    def store(self) -> list[tuple[str, str, str]]:
        """Set the hashed passwords and roles, write demo-logins.txt; the logins."""
        logins = []
        with transaction.atomic():
            for name, user in self.users.items():
                if name in self.hashes:
                    user.password = self.hashes[name].result()
                user.is_staff = user.is_superuser = name == ADMIN
                user.save()
                logins.append((name, self.passwords[name], self.roles[name]))
        path = _logins_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text("".join(f"{n} {p} {r}\n" for n, p, r in logins))
        return logins


def _logins_file() -> Path:
    return Path(settings.DATA_DIR) / "demo-logins.txt"


def _logins(rows: list[tuple[str, str]], hasher: Executor | None) -> PendingLogins:
    path = _logins_file()
    lines = path.read_text().splitlines() if path.exists() else []
    known = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
    user_model = get_user_model()
    roles: dict[str, str] = {}
    for name, role in rows:
        roles.setdefault(name, role)  # a name's first role, in the rows' order
    passwords = {name: known.get(name) or secrets.token_urlsafe(9) for name in roles}
    users = {name: user_model.objects.get_or_create(username=name) for name in roles}
    fresh = [name for name, (_, created) in users.items() if created or name not in known]
    submit = hasher.submit if hasher else _now
    hashes = {name: submit(make_password, passwords[name]) for name in fresh}
    return PendingLogins({n: u for n, (u, _) in users.items()}, passwords, roles, hashes)


def _now(fn: Callable[..., str], *args: Any) -> Future[str]:
    """A finished future of ``fn(*args)`` (no executor: hash here)."""
    done: Future[str] = Future()
    done.set_result(fn(*args))
    return done


def _memberships(desc: dict[str, Any]) -> None:
    users = {u.username: u for u in get_user_model().objects.all()}
    for team_desc in desc.get("teams", []):
        team = Team.objects.get(slug=team_desc["account"])
        for name in {team_desc["lead"], *team_desc["members"]}:
            role = Membership.Role.LEAD if name == team_desc["lead"] else Membership.Role.MEMBER
            Membership.objects.update_or_create(user=users[name], team=team,
                                                defaults={"role": role})


# --- The import steps --------------------------------------------------------------------


def _gpu_history(cluster: Cluster, log: Path) -> dict[str, Any]:
    if not log.exists():
        return {"intervals": 0, "note": "no gpu-map.log"}
    with log.open(encoding="utf-8", errors="replace") as lines:
        return sync.import_gpu_map(cluster, lines)


def _label_all(cluster: Cluster) -> dict[str, Any]:
    """``label_jobs`` works in batches (a beat task's share); the demo wants them all."""
    total: dict[str, int] = {"jobs": 0, "labelled": 0}
    while True:
        stats = labels.label_jobs(cluster)
        total["jobs"] += stats["jobs"]
        total["labelled"] += stats["labelled"]
        if stats["jobs"] == 0 or stats["labelled"] == 0:
            return total


def archive_telemetry(cluster: Cluster, folder: Path, report: Report,
                      now: datetime | None = None) -> dict[str, Any]:
    """Every started GPU job without a final archive, from the telemetry files (one pass
    over them: ``archive_many``), with progress."""
    files = sorted(folder.glob("*.om")) if folder.is_dir() else []
    todo = (Job.objects.filter(cluster=cluster, gpu_equivalent__gt=0, start_time__isnull=False)
            .exclude(metrics__status__in=JobMetrics.FINAL).select_related("cluster"))
    count = todo.count()
    if not files or not count:
        return {"jobs": 0, "files": len(files)}
    source = archive.OpenMetricsSource([folder], archive.catalogue_for(cluster))
    statuses: dict[str, int] = {}
    # a queryset, not a list: the pass then holds one batch of jobs at a time
    for metrics in archive.iter_archive(todo, source, now=now,
                                        progress=lambda d, t: report("archive", d, t)):
        statuses[str(metrics.status)] = statuses.get(str(metrics.status), 0) + 1
    return {"jobs": count, "files": len(files), **statuses}


def import_traces(cluster: Cluster, folder: Path, report: Report) -> dict[str, Any]:
    """``traces/<job id>/`` folders through ``import_trace`` (re-imports update in place)."""
    dirs = sorted(d for d in folder.iterdir() if d.is_dir() and d.name.isdigit()) \
        if folder.is_dir() else []
    jobs = {j.job_id: j for j in Job.objects.filter(cluster=cluster,
                                                     job_id__in=[int(d.name) for d in dirs])}
    done, missing = 0, []
    for number, directory in enumerate(dirs, start=1):
        job = jobs.get(int(directory.name))
        if job is None:
            missing.append(directory.name)
            continue
        traces.import_trace(job, _trace_files(directory))
        done += 1
        report("traces", number, len(dirs))
    return {"imported": done, "unknown_jobs": missing,
            "stored": TraceRun.objects.filter(job__cluster=cluster).count()}


# Per GPU-hour in CHARGEBACK_CURRENCY, by GPU model ("": any other); made up for the demo.
EXAMPLE_PRICES = {"h200": "3.20", "h100": "2.50", "a100": "1.60", "": "1.00"}
EXAMPLE_NOTE = "example prices (demo): not a real tariff"


def chargeback(cluster: Cluster, now: datetime) -> dict[str, Any]:
    """Statements ready out of the box (issue 19): an example rate card when the card is
    empty (labelled as such; an admin's own card is never touched), then the draft
    statements of every simulated month, computed at the simulated "now"."""
    first = Job.objects.filter(cluster=cluster, start_time__isnull=False).aggregate(
        first=Min("start_time"))["first"]
    months = billing.months_between(first or now, now)
    added = 0
    if not Rate.objects.exists():
        models = {t["name"] for t in cluster.gpu_types} | {""}
        added = len(Rate.objects.bulk_create([
            Rate(gpu_model=model, price=Decimal(price), valid_from=months[0], note=EXAMPLE_NOTE)
            for model, price in EXAMPLE_PRICES.items() if model in models]))
    results = [billing.refresh_statements(month, now=now) for month in months]
    return {"example_rates": added, "months": [r.month for r in results],
            "drafts": sum(r.drafts for r in results)}


def evaluate_slos(now: datetime) -> dict[str, Any]:
    """Scorecards and monthly snapshots at the simulated "now" (nothing is sent: the
    demo's people have no mail); a second load computes the same rows."""
    result = slo.run_evaluation(now, notify=False, force_snapshots=True)
    return {"scorecards": result.scorecards, "snapshots": result.snapshots}


def _trace_files(directory: Path) -> Sequence[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file())
