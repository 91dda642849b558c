"""Slurm's associations and fairshare as 22.05 prints them, from the simulated month.

``sacctmgr -P show assoc format=Cluster,Account,User,ParentName,Share,GrpTRES,GrpTRESMins,
GrpTRESRunMins,GrpJobs,MaxTRES,MaxWall,QOS,DefaultQOS`` and ``sshare -a -P -o Account,User,
RawShares,NormShares,RawUsage,EffectvUsage,FairShare,LevelFS,GrpTRESMins,TRESRunMins,
GrpTRESRaw``: the same columns, order, indentation and number formats as the recorded
``tests/fixtures/slurm/{sacctmgr_assoc,sshare}.txt``.

Usage decays with the scheduler's half-life (``PriorityDecayHalfLife=7-0``): a job using
``r`` of a TRES over [s, e] counts ``r * H / ln 2 * (2^-(now-e)/H - 2^-(now-s)/H)`` at now.
``RawUsage`` is decayed billing-seconds, ``GrpTRESRaw`` decayed TRES-minutes, and
``FairShare`` is Fair Tree's rank (accounts, then users, by LevelFS; ``rank / users``).
The limits are those the month respected: ``GrpTRES gres/gpu`` is the limit the scheduler
enforced (``workload.gpu_limit``: the account's jobs waited with ``AssocGrpGRES`` at it), and
``GrpTRESMins`` quotas sit above the accounts' decayed usage at now.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from apps.simulator.cluster import Cluster
from apps.simulator.slurm_json import TRES_IDS, gpu_type
from apps.simulator.workload import GPU_LIMITED, HALF_LIFE, Job, gpu_limit

ASSOC_HEADER = ("Cluster|Account|User|ParentName|Share|GrpTRES|GrpTRESMins|GrpTRESRunMins|"
                "GrpJobs|MaxTRES|MaxWall|QOS|Def QOS")
SSHARE_HEADER = ("Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|LevelFS|"
                 "GrpTRESMins|TRESRunMins|GrpTRESRaw")
QOS = "high,low,normal"
# (account, fraction of the quota used at now): one close to its GPU-hour quota, one not
QUOTAS = (("robotics", 0.85), ("speech", 0.4))
TRES_ORDER = sorted(TRES_IDS, key=TRES_IDS.__getitem__)
# configured (AccountingStorageTRES) where the cluster has the GPUs: the MI300X partition's
OPTIONAL_TRES = {("gres", "gpu:mi300x")}


def tres_order(cluster: Cluster) -> list[tuple[str, str]]:
    """The TRES sshare prints, in id order: the optional ones where the cluster has them."""
    types = {("gres", f"gpu:{n.gpu_type}") for n in cluster.nodes}
    return [k for k in TRES_ORDER if k not in OPTIONAL_TRES or k in types]


@dataclass
class Usage:
    """One association's decayed TRES-seconds and its running jobs' remaining TRES-minutes."""

    seconds: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    run_mins: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, other: Usage) -> None:
        for key, value in other.seconds.items():
            self.seconds[key] += value
        for key, minutes in other.run_mins.items():
            self.run_mins[key] += minutes

    @property
    def billing_seconds(self) -> float:
        return self.seconds[("billing", "")]


@dataclass(frozen=True)
class Limits:
    """Per account: GrpTRES and GrpTRESMins, as ``{tres: value}``."""

    grp_tres: dict[str, dict[str, int]]
    grp_tres_mins: dict[str, dict[str, int]]


def _tres_counts(cluster: Cluster, job: Job) -> dict[tuple[str, str], int]:
    return {("cpu", ""): job.cpus, ("mem", ""): job.memory_mb, ("node", ""): len(job.alloc),
            ("billing", ""): job.cpus + 8 * job.gpus, ("gres", "gpu"): job.gpus,
            ("gres", f"gpu:{gpu_type(cluster, job)}"): job.gpus}


def _decayed(start: int, end: int, now: int) -> float:
    """Seconds of [start, end] weighted by the decay to now."""
    k = math.log(2) / HALF_LIFE
    return (math.exp(-k * (now - end)) - math.exp(-k * (now - start))) / k


def usage(cluster: Cluster, jobs: list[Job], now: int) -> dict[tuple[str, str], Usage]:
    """Decayed usage per (account, user) of every job that ran."""
    out: dict[tuple[str, str], Usage] = defaultdict(Usage)
    for job in jobs:
        if job.start is None or not job.alloc:
            continue
        end = job.end if job.end is not None else now
        weight = _decayed(job.start, end, now)
        row = out[(job.account, job.user)]
        for key, count in _tres_counts(cluster, job).items():
            row.seconds[key] += count * weight
            if job.end is None:  # TRESRunMins: what is left of its time limit
                left = max(0, job.time_limit_min * 60 - (now - job.start)) // 60
                row.run_mins[key] += count * left
    return out


def limits(cluster: Cluster, jobs: list[Job], used: dict[tuple[str, str], Usage]) -> Limits:
    """Limits the simulated month respected (see the module docstring)."""
    mins: dict[str, dict[str, int]] = {}
    for account, fraction in QUOTAS:
        gpu_minutes = sum(u.seconds[("gres", "gpu")] for (a, _), u in used.items()
                          if a == account) / 60
        quota = max(600, math.ceil(gpu_minutes / fraction / 600) * 600)  # 10 GPU-hour steps
        mins[account] = {"gres/gpu": quota}
    return Limits({GPU_LIMITED: {"gres/gpu": gpu_limit(cluster)}}, mins)


# --- sacctmgr show assoc -------------------------------------------------------------


def sacctmgr_assoc(cluster: Cluster, lim: Limits) -> str:
    """``sacctmgr -P show assoc format=...``: root, root's user, then each account and its
    users, in name order."""
    rows = [ASSOC_HEADER, f"{cluster.name}|root|||1|||||||normal|",
            f"{cluster.name}|root|root||1|||||||normal|"]
    for team in sorted(cluster.teams, key=lambda t: t.account):
        rows.append("|".join((cluster.name, team.account, "", "root", str(team.share),
                              _limit(lim.grp_tres.get(team.account)),
                              _limit(lim.grp_tres_mins.get(team.account)), "", "", "", "",
                              QOS, "normal")))
        rows += [f"{cluster.name}|{team.account}|{user}||1|||||||{QOS}|normal"
                 for user in sorted(team.users)]
    return "\n".join(rows) + "\n"


def _limit(values: dict[str, int] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (values or {}).items())


# --- sshare -a -------------------------------------------------------------------------


@dataclass
class _Node:
    """An association in the fairshare tree."""

    account: str
    user: str
    shares: int
    usage: Usage
    depth: int
    norm_shares: float = 0.0
    effective: float = 0.0
    children: list[_Node] = field(default_factory=list)

    @property
    def level_fs(self) -> float:
        return self.norm_shares / self.effective if self.effective > 0 else math.inf


def sshare(cluster: Cluster, used: dict[tuple[str, str], Usage], lim: Limits) -> str:
    """``sshare -a -P -o ...``: the tree with decayed usage and Fair Tree's FairShare."""
    root = _tree(cluster, used)
    ranked = _fair_tree_order(root)
    fairshare = {(n.account, n.user): (len(ranked) - i) / len(ranked)
                 for i, n in enumerate(ranked)}
    order = tres_order(cluster)
    lines = [SSHARE_HEADER, "|".join(("root", "", "", "0.000000", _raw(root.usage),
                                      "1.000000", "", "", "", _tres(root.usage, order, run=True),
                                      _tres(root.usage, order)))]
    for node in root.children:
        lines.append(_share_line(node, fairshare.get((node.account, node.user)),
                                 lim.grp_tres_mins.get(node.account) if not node.user else None,
                                 order))
        for user in node.children:
            lines.append(_share_line(user, fairshare[(user.account, user.user)], None, order))
    return "\n".join(lines) + "\n"


def _tree(cluster: Cluster, used: dict[tuple[str, str], Usage]) -> _Node:
    root = _Node("root", "", 0, Usage(), 0)
    root.children.append(_Node("root", "root", 1, Usage(), 1))
    for team in sorted(cluster.teams, key=lambda t: t.account):
        account = _Node(team.account, "", team.share, Usage(), 1)
        for user in sorted(team.users):
            row = used.get((team.account, user), Usage())
            account.children.append(_Node(team.account, user, 1, row, 2))
            account.usage.add(row)
        root.children.append(account)
        root.usage.add(account.usage)
    _normalise(root)
    return root


def _normalise(parent: _Node) -> None:
    """NormShares and EffectvUsage relative to the siblings and the parent (as sshare shows)."""
    shares = sum(c.shares for c in parent.children) or 1
    total = parent.usage.billing_seconds
    for child in parent.children:
        child.norm_shares = child.shares / shares
        child.effective = child.usage.billing_seconds / total if total > 0 else 0.0
        _normalise(child)


def _fair_tree_order(node: _Node) -> list[_Node]:
    """Users in Fair Tree's order: siblings by LevelFS (highest first), depth first."""
    out: list[_Node] = []
    for child in sorted(node.children, key=lambda c: (-c.level_fs, c.account, c.user)):
        out += [child] if child.user else _fair_tree_order(child)
    return out


def _share_line(node: _Node, fairshare: float | None, grp_tres_mins: dict[str, int] | None,
                order: list[tuple[str, str]]) -> str:
    level = "inf" if math.isinf(node.level_fs) else f"{node.level_fs:f}"
    return "|".join((" " * node.depth + node.account, node.user, str(node.shares),
                     f"{node.norm_shares:f}", _raw(node.usage), f"{node.effective:f}",
                     "" if fairshare is None else f"{fairshare:f}", level,
                     _limit(grp_tres_mins), _tres(node.usage, order, run=True),
                     _tres(node.usage, order)))


def _raw(used: Usage) -> str:
    return str(int(used.billing_seconds))


def _tres(used: Usage, order: list[tuple[str, str]], run: bool = False) -> str:
    """Every TRES in id order, ``name=value`` (decayed minutes, or running minutes)."""
    values = used.run_mins if run else {k: v / 60 for k, v in used.seconds.items()}
    return ",".join(f"{t}/{n}={int(values.get((t, n), 0))}" if n else
                    f"{t}={int(values.get((t, n), 0))}" for t, n in order)


# --- QOS ------------------------------------------------------------------------------------

QOS_HEADER = ("Name|Priority|Flags|GrpTRES|GrpJobs|MaxTRES|MaxTRESPerNode|MaxTRESPU|MaxTRESPA|"
              "MaxJobsPU|MaxSubmitPU|MaxWall|Preempt|Descr")


def sacctmgr_qos() -> str:
    """``sacctmgr -P show qos format=Name,Priority,Flags,GrpTRES,GrpJobs,MaxTRES,MaxTRESPerNode,
    MaxTRESPU,MaxTRESPA,MaxJobsPU,MaxSubmitPU,MaxWall,Preempt,Description``: the three QOS
    the simulated scheduler weighs (``schedule.QOS_FACTOR``: priorities in the same ratio),
    with no limit, because it enforces none of theirs."""
    rows = [("normal", 10, "Normal QOS default"), ("high", 100, "high priority"),
            ("low", 0, "low priority")]
    return "".join([QOS_HEADER + "\n", *(f"{name}|{prio}||||||||||||{descr}\n"
                                         for name, prio, descr in rows)])
