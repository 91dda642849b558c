"""Why a job waits, in words: Slurm's pending reason codes for the people who own the job.

``scontrol``/``squeue`` print codes such as ``AssocGrpGRESMinutes``; the job page shows the
sentence below next to the code. Quota reasons (a ``Grp...Minutes`` limit of the account or
QOS) are flagged so the page can link to the team's quota.

**Whose wait is it?** (the queue-wait SLO, docs/slo.md). ``wait_cause`` sorts a reason into
``own`` (the team's own limits and choices: QOS and association limits, dependencies, holds,
begin times, array throttles, requests above a partition's limits) or ``resources`` (the
platform had no room: priority, resources, nodes down or reserved). Unknown codes count as
``resources``: a wait nobody can explain is charged to the platform, never hidden. The
tables below are the whole classification; the SLO pages print them.
"""

from __future__ import annotations

import re

REASONS: dict[str, str] = {
    "AssocGrpGRESMinutes": "your team's GPU-hour quota is used up",
    "AssocGrpGRESRunMinutes": "your team's running jobs already hold the rest of its "
                              "GPU-hour quota",
    "AssocGrpBillingMinutes": "your team's billing quota is used up",
    "AssocGrpCPUMinutes": "your team's CPU-hour quota is used up",
    "AssocGrpGRES": "your team is using the most GPUs it may hold at once",
    "AssocGrpJobsLimit": "your team is running the most jobs it may run at once",
    "AssocMaxJobsLimit": "you are running the most jobs you may run at once",
    "QOSGrpGRESMinutes": "the QOS's GPU-hour quota is used up",
    "QOSGrpGRES": "the QOS is using the most GPUs it may hold at once",
    "QOSMaxGRESPerUser": "you are using the most GPUs this QOS allows per user",
    "Resources": "waiting for enough free GPUs",
    "Priority": "other jobs are ahead of this one in the queue",
    "Dependency": "waiting for the job it depends on",
    "DependencyNeverSatisfied": "the job it depends on ended in a way that never lets it start",
    "BeginTime": "waiting for the start time it was given",
    "JobHeldUser": "held by its owner (scontrol release starts it)",
    "JobHeldAdmin": "held by an administrator",
    "JobArrayTaskLimit": "the array already runs as many tasks at once as it allows",
    "PartitionTimeLimit": "its time limit is above the partition's maximum",
    "ReqNodeNotAvail": "a node it needs is not available",
    "ReservationDeleted": "the reservation it asked for no longer exists",
}
# Waits the team causes itself: its limits, dependencies, holds and its own requests.
OWN_REASONS: frozenset[str] = frozenset({
    "Dependency", "DependencyNeverSatisfied", "BeginTime", "JobHeldUser", "JobHeldAdmin",
    "JobArrayTaskLimit", "PartitionTimeLimit", "PartitionNodeLimit", "InvalidAccount",
    "InvalidQOS", "AccountNotAllowed", "QOSNotAllowed", "BadConstraints",
})
# Every association or QOS limit (AssocGrpGRES, QOSMaxGRESPerUser, QOSGrpCpuLimit...)
OWN_PREFIXES: tuple[str, ...] = ("Assoc", "QOS")
# Waits for the platform: said explicitly, though any other code counts the same way.
RESOURCE_REASONS: frozenset[str] = frozenset({
    "None", "Priority", "Resources", "ReqNodeNotAvail", "Reservation", "NodeDown",
    "PartitionDown", "PartitionInactive", "Licenses", "Prolog", "BurstBufferResources",
})
OWN, RESOURCES = "own", "resources"
_QUOTA = re.compile(r"^(Assoc|QOS)Grp\w*(RunMinutes|Minutes)$")


def is_quota_reason(reason: str) -> bool:
    """True for reasons that mean a GPU-hour (or other TRES-minutes) quota holds the job."""
    return bool(_QUOTA.match(reason.strip()))


def reason_words(reason: str) -> str:
    """The sentence for a pending reason code, or "" for none and codes we do not know."""
    code = reason.strip()
    if code in REASONS:
        return REASONS[code]
    if is_quota_reason(code):
        scope = "your team's" if code.startswith("Assoc") else "the QOS's"
        return f"{scope} quota for this kind of resource is used up"
    return ""


def wait_cause(reason: str) -> str:
    """``own`` when the team's own limits or choices held the job, else ``resources``."""
    code = reason.strip()
    if code in OWN_REASONS or code.startswith(OWN_PREFIXES):
        return OWN
    return RESOURCES


def wait_cause_table() -> list[tuple[str, str, str]]:
    """(code or pattern, cause, words) for every classified reason: what the pages print."""
    rows = [(code, OWN, REASONS.get(code, "")) for code in sorted(OWN_REASONS)]
    rows += [(f"{prefix}… (any association or QOS limit)", OWN, "") for prefix in OWN_PREFIXES]
    rows += [(code, RESOURCES, REASONS.get(code, "")) for code in sorted(RESOURCE_REASONS)]
    rows.append(("any other code", RESOURCES, "charged to the platform until classified"))
    return rows
