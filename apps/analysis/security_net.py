"""Network and access rules: InfiniBand (3), SSH logins (5), exposed services (6).
Registered in ``security_rules.RULES``."""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Sequence

from apps.analysis.security_base import (
    iso,
    long_enough,
    lower,
    mean,
    param,
    quiet,
    reportable,
    runs,
    span,
    window,
)
from apps.analysis.security_types import (
    Allocation,
    Allow,
    Hit,
    Inputs,
    NodePoint,
    NodeTrack,
    Outcome,
    RuleConfig,
    SshEvent,
    SshSource,
)

# --- 3. InfiniBand ---------------------------------------------------------------------------


def ib_traffic_without_multinode_job(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """InfiniBand bytes above the node's storage baseline on a node no multi-node job holds
    (give or take ``grace_minutes``), for at least ``min_minutes``. The baseline is the
    node group's or partition's (``Allow.ib_baselines``), else ``baseline_bps``."""
    out = Outcome()
    if inputs.frame is None:
        return out
    step, grace = inputs.frame.step, param(cfg, "grace_minutes") * 60
    for node in inputs.frame.nodes:
        multi = [a for a in inputs.allocations if a.multi_node and node.host in a.nodes]
        baseline, source = allow.ib_baseline(node.host, param(cfg, "baseline_bps"))

        def keep(p: NodePoint, node: NodeTrack = node, multi: list[Allocation] = multi,
                 baseline: float = baseline) -> bool:
            return (p.ib_bps is not None and p.ib_bps >= baseline and not quiet(allow, node.host, p)
                    and not any(a.overlaps(node.host, p.t - step, p.t, grace) for a in multi))

        for run in runs(node.points, keep, step):
            if long_enough(node.points, run, step, param(cfg, "min_minutes")):
                _add_ib_hit(out, inputs, cfg, node, run, step, (baseline, source))
    return out


def _add_ib_hit(out: Outcome, inputs: Inputs, cfg: RuleConfig, node: NodeTrack, run: list[int],
                step: float, baseline: tuple[float, str]) -> None:
    pts = node.points
    start, end = span(pts, run, step)
    if not reportable(inputs, end):
        return
    rates = [pts[i].ib_bps or 0.0 for i in run]
    devices = Counter(pts[i].ib_device for i in run if pts[i].ib_device)
    sharing = sorted({(a.job_id, a.user) for a in inputs.allocations
                      if a.overlaps(node.host, start, end)})
    out.hits.append(Hit(
        "ib_traffic_without_multinode_job", cfg.severity, node.host,
        f"{node.host}: {round(max(rates) / 1e9, 1)} GB/s InfiniBand with no multi-node job",
        start, end, node=node.host, merge_gap=1.5 * step,
        evidence={"window": window(start, end), "mean_bps": round(sum(rates) / len(rates)),
                  "peak_bps": round(max(rates)), "baseline_bps": baseline[0],
                  "baseline_from": baseline[1],
                  "device": devices.most_common(1)[0][0] if devices else "",
                  "node_level": f"InfiniBand counters are per node: {len(sharing)} job(s) "
                                f"shared it during this stretch",
                  "other_jobs": [{"job_id": j, "user": u} for j, u in sharing]}))


def rdma_transport_errors(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Out-of-sequence and duplicate packets above ``errors_per_s`` while the node's links
    report no symbol errors or recoveries, for at least ``min_minutes``."""
    out = Outcome()
    if inputs.frame is None:
        return out
    step, limit = inputs.frame.step, param(cfg, "errors_per_s")
    for node in inputs.frame.nodes:
        def keep(p: NodePoint, node: NodeTrack = node) -> bool:
            return (p.transport_errors_ps is not None and p.transport_errors_ps >= limit
                    and not (p.link_errors_ps or 0) > 0 and not quiet(allow, node.host, p))

        for run in runs(node.points, keep, step):
            start, end = span(node.points, run, step)
            if long_enough(node.points, run, step, param(cfg, "min_minutes")) and \
                    reportable(inputs, end):
                rate = mean(node.points[i].transport_errors_ps for i in run) or 0.0
                out.hits.append(Hit(
                    "rdma_transport_errors", cfg.severity, node.host,
                    f"{node.host}: {round(rate)} RDMA transport errors/s without link errors",
                    start, end, node=node.host, merge_gap=1.5 * step,
                    evidence={"window": window(start, end), "errors_per_s": round(rate, 1),
                              "link_errors_per_s": 0, "threshold": limit}))
    return out


def ib_partition_key_violation(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Any bucket where a node's partition-key constraint errors grew by ``min_errors``."""
    out = Outcome()
    if inputs.frame is None:
        return out
    step, least = inputs.frame.step, param(cfg, "min_errors")
    for node in inputs.frame.nodes:
        def keep(p: NodePoint, node: NodeTrack = node) -> bool:
            return (p.pkey_errors or 0) >= least and not quiet(allow, node.host, p)

        for run in runs(node.points, keep, step):
            start, end = span(node.points, run, step)
            if reportable(inputs, end):
                total = sum(node.points[i].pkey_errors or 0 for i in run)
                out.hits.append(Hit(
                    "ib_partition_key_violation", cfg.severity, node.host,
                    f"{node.host}: {round(total)} InfiniBand partition-key violations",
                    start, end, node=node.host, merge_gap=1.5 * step,
                    evidence={"window": window(start, end), "errors": round(total)}))
    return out


# --- 5. SSH ---------------------------------------------------------------------------------


def ssh_without_allocation(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Accepted logins of users with no job on that node at that time (± grace)."""
    out = Outcome()
    grace = param(cfg, "grace_minutes") * 60
    mine: dict[str, list[Allocation]] = {}
    for a in inputs.allocations:
        mine.setdefault(a.user, []).append(a)
    for e in inputs.ssh:
        if e.kind != "accepted" or not inputs.inside(e.t) or _allowed_user(allow, e.user):
            continue
        held = mine.get(e.user, [])
        if any(a.overlaps(e.host, e.t, e.t, grace) for a in held):
            continue
        out.hits.append(_login_hit(inputs, cfg, e, held))
    return out


def _allowed_user(allow: Allow, user: str) -> bool:
    return user in allow.admin_users or user in allow.exempt_users


def _login_hit(inputs: Inputs, cfg: RuleConfig, e: SshEvent, held: Sequence[Allocation]) -> Hit:
    on_node = [a for a in held if e.host in a.nodes]
    nearest = min(on_node, key=lambda a: min(abs(a.start - e.t), abs(a.end - e.t)), default=None)
    return Hit("ssh_without_allocation", cfg.severity, f"{e.host}:{e.user}",
               f"{e.user} logged in to {e.host} without a job there", e.t, e.t, node=e.host,
               user=e.user, team=inputs.user_teams.get(e.user, ""),
               evidence={"at": iso(e.t), "method": e.method, "source_ip": e.source,
                         "grace_minutes": param(cfg, "grace_minutes"),
                         "nearest_job_on_node": nearest.job_id if nearest else None,
                         "jobs_of_user_in_window": len(held)})


def ssh_repeated_denials(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """``count`` denials or failed passwords from one source within ``window_minutes``."""
    out = Outcome()
    need, width = int(param(cfg, "count")), param(cfg, "window_minutes") * 60
    by_source: dict[str, list[SshEvent]] = {}
    for e in sorted(inputs.ssh, key=lambda e: e.t):
        if e.kind in ("denied", "failed") and not _allowed_user(allow, e.user):
            by_source.setdefault(e.source or e.user or e.host, []).append(e)
    for source, events in sorted(by_source.items()):
        burst = _burst(events, need, width)
        if burst and inputs.inside(burst[-1].t):
            out.hits.append(_denial_hit(inputs, cfg, source, burst))
    return out


def _burst(events: list[SshEvent], need: int, width: float) -> list[SshEvent]:
    """The largest run of ``need`` or more events within ``width`` seconds ([] if none)."""
    best: list[SshEvent] = []
    lo = 0
    for hi in range(len(events)):
        while events[hi].t - events[lo].t > width:
            lo += 1
        if hi - lo + 1 >= need and hi - lo + 1 > len(best):
            best = events[lo:hi + 1]
    return best


def _denial_hit(inputs: Inputs, cfg: RuleConfig, source: str, burst: list[SshEvent]) -> Hit:
    hosts = sorted({e.host for e in burst})
    users = sorted({e.user for e in burst if e.user})
    user = users[0] if len(users) == 1 else ""
    minutes = round((burst[-1].t - burst[0].t) / 60)
    return Hit("ssh_repeated_denials", cfg.severity, source,
               f"{len(burst)} SSH denials from {source} in {minutes} min", burst[0].t,
               burst[-1].t, node=hosts[0] if len(hosts) == 1 else "", user=user,
               team=inputs.user_teams.get(user, ""), merge_gap=param(cfg, "window_minutes") * 60,
               evidence={"window": window(burst[0].t, burst[-1].t), "denials": len(burst),
                         "nodes": hosts, "users": users, "source_ip": source})


def ssh_unexpected_source(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Accepted logins from a source not allowed for that kind of user: the networks of
    ``allowed_sources`` (everyone) and the site's SSH sources (everyone, admins only,
    service accounts only). Off while no source is configured. An admin login from an
    unlisted address counts once a source is listed for admins; until then admins log in
    from anywhere."""
    out = Outcome()
    sources = [SshSource(str(text), "everyone", "allowed_sources")
               for text in param(cfg, "allowed_sources")] + list(allow.ssh_sources)
    networks = []
    for source in sources:
        try:
            networks.append((ipaddress.ip_network(source.network, strict=False), source))
        except ValueError:
            out.skipped.append(f"ssh_unexpected_source: {source.network[:60]!r} is not a network")
    if not networks:
        return out
    admins_listed = any(s.who == "admins" for _, s in networks)
    for e in inputs.ssh:
        if e.kind != "accepted" or not inputs.inside(e.t) or not e.source:
            continue
        kind = allow.user_kind(e.user)
        if kind == "admins" and not admins_listed:
            continue
        verdict = login_source(kind, e.source, networks)
        if verdict is not None:
            out.hits.append(_source_hit(inputs, cfg, e, kind, verdict))
    return out


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def login_source(kind: str, address: str,
                 networks: Sequence[tuple[Network, SshSource]]) -> str | None:
    """None when a login of this kind of user (``admins``, ``service``, ``users``) from
    ``address`` is allowed; else why not: the source it came from is for others, or it is
    in no listed network. An unreadable address is not allowed."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address[:60]!r} is not an address"
    inside = [s for net, s in networks if ip in net]
    if any(s.who in ("everyone", kind) for s in inside):
        return None
    if inside:
        names = ", ".join(sorted({s.name or s.network for s in inside}))
        return f"{names} is for {', '.join(sorted({s.who for s in inside}))} only"
    return "in no allowed network"


def _source_hit(inputs: Inputs, cfg: RuleConfig, e: SshEvent, kind: str, why: str) -> Hit:
    return Hit("ssh_unexpected_source", cfg.severity, f"{e.source}:{e.user}",
               f"{e.user} logged in to {e.host} from {e.source}", e.t, e.t, node=e.host,
               user=e.user, team=inputs.user_teams.get(e.user, ""),
               evidence={"at": iso(e.t), "source_ip": e.source, "method": e.method,
                         "user_kind": kind, "why": why})


# --- 6. Exposed services --------------------------------------------------------------------

_AUTH_STATUSES = frozenset({301, 302, 303, 307, 308, 401, 403, 407})


def exposed_service(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Probes answered without authentication: critical for code execution, two levels
    lower for other services; a service that asks for authentication is no finding."""
    out = Outcome()
    code_exec = set(param(cfg, "code_exec_services"))
    ports = param(cfg, "ports")
    for p in sorted(inputs.probes, key=lambda p: p.t):
        if not inputs.inside(p.t) or p.status is None or not 200 <= p.status < 300 \
                or p.auth_required or p.status in _AUTH_STATUSES:
            continue
        service = p.service or ports.get(str(p.port), f"port {p.port}")
        severity = cfg.severity if service in code_exec else lower(cfg.severity, 2)
        where = f"job {p.job_id}" if p.job_id else p.node
        out.hits.append(Hit(
            "exposed_service", severity, f"{p.node}:{p.port}:{p.job_id or ''}",
            f"{service} on {p.node}:{p.port} ({where}) answers without authentication",
            p.t, p.t, node=p.node, job_id=p.job_id, user=p.user, team=p.team,
            merge_gap=86400.0,
            evidence={"at": iso(p.t), "service": service, "port": p.port, "url": p.url,
                      "status": p.status, "auth_required": bool(p.auth_required),
                      "code_execution": service in code_exec}))
    return out
