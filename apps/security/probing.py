"""The opt-in active probe of running jobs' nodes for exposed services (rule 6).

Off unless ``SECURITY_PROBE_ENABLED``. The allow-list is built here and nowhere else:
only nodes that running jobs of this cluster hold, only the ports of the
``exposed_service`` rule (data admins edit). Answers are stored as ``ServiceProbe`` rows,
the same rows a node-side collector posts, and the next detection run judges them.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from django.conf import settings

from apps.analysis.hostlist import expand as expand_hostlist
from apps.clusters.models import Cluster
from apps.core.runs import tracked_run
from apps.jobs.models import Job
from apps.security.adapters.probe import PATHS, Prober, ProbeTarget
from apps.security.models import SecurityRule, ServiceProbe


class ProbeDisabled(RuntimeError):
    """The site has not opted in (``SECURITY_PROBE_ENABLED``)."""


def targets(cluster: Cluster, ports: dict[str, str] | None = None) -> list[ProbeTarget]:
    """Allocated nodes x the rule's HTTP ports; a node's job and user when only one job
    runs there (otherwise the answer cannot say whose service it is)."""
    if ports is None:
        rule = SecurityRule.objects.filter(key="exposed_service").first()
        ports = dict(rule.as_config().params["ports"]) if rule else {}
    on_node: dict[str, list[Job]] = defaultdict(list)
    for job in Job.objects.filter(cluster=cluster, state=Job.State.RUNNING).exclude(nodes=""):
        for node in expand_hostlist(job.nodes):
            on_node[node].append(job)
    found = []
    for node, jobs in sorted(on_node.items()):
        only = jobs[0] if len(jobs) == 1 else None
        for port, service in sorted(ports.items()):
            if service in PATHS and str(port).isdigit():
                found.append(ProbeTarget(node, int(port), service,
                                         only.job_id if only else None,
                                         only.user_name if only else ""))
    return found


def probe_cluster(cluster: Cluster, prober: Prober | None = None,
                  ports: dict[str, str] | None = None) -> dict[str, int]:
    """Probe every allow-listed target once; store the answers; return counts."""
    if not settings.SECURITY_PROBE_ENABLED:
        raise ProbeDisabled("active probing is off (set SECURITY_PROBE_ENABLED=1 to opt in)")
    prober = prober or Prober(settings.SECURITY_PROBE_TIMEOUT, settings.SECURITY_PROBE_PER_SECOND)
    with tracked_run("security.probe", cluster=cluster, target=cluster.name) as run:
        answers = prober.probe(targets(cluster, ports))
        rows = [ServiceProbe(cluster=cluster, node=a.target.node, port=a.target.port,
                             service=a.target.service, url=a.target.url, status=a.status,
                             auth_required=a.auth_required, job_id_raw=a.target.job_id,
                             user_name=a.target.user,
                             observed_at=datetime.fromtimestamp(a.observed_at, UTC))
                for a in answers]
        ServiceProbe.objects.bulk_create(rows, ignore_conflicts=True)
        run.stats = {"probed": len(rows), "answered": sum(1 for a in answers if a.status),
                     "open": sum(1 for a in answers if a.status and not a.auth_required)}
    return run.stats
