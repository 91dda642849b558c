"""AI-aware job labels: fetch stored batch scripts, match the rules, store ``Job.labels``.

The rules are data (``settings.JOB_LABEL_RULES``, default ``apps/jobs/label_rules.json``);
the matching is pure (``apps.analysis.job_labels``). Each run labels at most
``LABEL_BATCH`` jobs that were not labelled with the current rules version, newest first,
so a large backlog drains over a few runs. A job without a stored script gets only the
rules version (``{"rules": 1}``), so it is not asked for again.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from apps.analysis.job_labels import MAX_SCRIPT, LabelRules, match_labels, rules_from_dict
from apps.clusters.adapters.slurm import SlurmClient
from apps.clusters.models import Cluster
from apps.clusters.services import client_for
from apps.core.runs import tracked_run
from apps.jobs.models import Job

LABEL_BATCH = 500
UPDATE_CHUNK = 900  # ids per UPDATE ... WHERE id IN (...)


@lru_cache(maxsize=4)
def load_rules(path: str) -> LabelRules:
    """Read and compile the rules file; a broken file is an error naming the file."""
    try:
        return rules_from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"job label rules {path}: {exc}") from exc


# Labels every scripted job has (the rules' version, the output paths): not an AI label.
NOT_AI_LABELS = {"rules", "stdout", "stderr"}


def _unlabelled(cluster: Cluster, rules: LabelRules, limit: int | None) -> list[Job]:
    stale = ~Q(labels__has_key="rules") | ~Q(labels__rules=rules.version)
    jobs = Job.objects.filter(stale, cluster=cluster).order_by("-submit_time", "-id")
    return list(jobs[:limit] if limit else jobs)


def _store(jobs: list[Job], script_of: Callable[[Job], str], rules: LabelRules) -> int:
    """Label the jobs and save the labels, one transaction per call.

    Most jobs share a handful of label sets (the same launcher, the same dataset), so
    jobs with the same labels are written by one UPDATE per set; bulk_update's CASE per
    row costs several times that. Label sets of one job go through bulk_update.
    """
    groups: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        job.labels = match_labels(script_of(job), rules)
        groups[json.dumps(job.labels, sort_keys=True)].append(job)
    single = [group[0] for group in groups.values() if len(group) == 1]
    with transaction.atomic():
        for group in groups.values():
            if len(group) > 1:
                for start in range(0, len(group), UPDATE_CHUNK):
                    chunk = group[start:start + UPDATE_CHUNK]
                    Job.objects.filter(pk__in=[j.pk for j in chunk]).update(
                        labels=chunk[0].labels)
        Job.objects.bulk_update(single, ["labels"], batch_size=500)
    return sum(1 for j in jobs if set(j.labels) - NOT_AI_LABELS)


def label_jobs(cluster: Cluster, client: SlurmClient | None = None,
               limit: int = LABEL_BATCH) -> dict[str, int]:
    """Label up to ``limit`` jobs of the cluster that lack labels of the current rules."""
    rules = load_rules(str(settings.JOB_LABEL_RULES))
    client = client or client_for(cluster)
    with tracked_run("slurm.label_jobs", cluster=cluster, target=cluster.name) as run:
        jobs = _unlabelled(cluster, rules, limit)
        scripts = client.job_scripts([j.job_id for j in jobs]) if jobs else {}
        labelled = _store(jobs, lambda job: scripts.get(job.display_id, ""), rules)
        run.stats = {"jobs": len(jobs), "scripts": len(scripts), "labelled": labelled}
    return run.stats


def label_jobs_from_dir(cluster: Cluster, directory: Path) -> dict[str, int]:
    """Label jobs from saved scripts ``<directory>/<raw job id>.sh`` (air-gapped sites and
    the simulator's ``slurm/scripts``), like ``sacct -j ID --batch-script`` would give."""
    rules = load_rules(str(settings.JOB_LABEL_RULES))

    def script_of(job: Job) -> str:
        path = directory / f"{job.job_id}.sh"
        try:
            with path.open(errors="replace") as f:
                return f.read(MAX_SCRIPT)
        except OSError:
            return ""

    with tracked_run("slurm.label_jobs", cluster=cluster, target=str(directory)) as run:
        jobs = _unlabelled(cluster, rules, None)
        run.stats = {"jobs": len(jobs), "labelled": _store(jobs, script_of, rules)}
    return run.stats
