"""GPU telemetry rules: activity no job owns (1), memory left after a job and GPUs shared
between users (7). Miner-like jobs (2) are in ``security_miner``. Registered in
``security_rules.RULES``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from apps.analysis.security_base import (
    as_int,
    gpu_tracks,
    long_enough,
    mean,
    param,
    quiet,
    reportable,
    runs,
    span,
    window,
)
from apps.analysis.security_types import (
    Allow,
    GpuPoint,
    GpuTrack,
    Hit,
    Inputs,
    Outcome,
    RuleConfig,
)

# --- 1. GPU activity that belongs to no job ----------------------------------------------------


def gpu_activity_without_job(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Busy (mean util >= util_min) or memory-holding (fb >= fb_min_mib) stretches of a GPU
    known to be held by no job, at least ``min_minutes`` long. A memory-only stretch right
    after a job's last bucket is rule 7's (memory left after a job)."""
    key = "gpu_activity_without_job"
    util_min, fb_min = param(cfg, "util_min"), param(cfg, "fb_min_mib")
    step, tracks = gpu_tracks(inputs)
    out = Outcome()
    for track in tracks:
        pts = track.points

        def keep(p: GpuPoint, track: GpuTrack = track) -> bool:
            return p.free and not quiet(allow, track.host, p, track) and (
                (p.util or 0) >= util_min or (p.fb_mib or 0) >= fb_min)

        for run in runs(pts, keep, step):
            util = mean(pts[i].util for i in run) or 0.0
            if not long_enough(pts, run, step, param(cfg, "min_minutes")):
                continue
            if util < util_min and _previous_owner(pts, run, step):
                continue  # memory left after a job: rule 7
            start, end = span(pts, run, step)
            if reportable(inputs, end):
                out.hits.append(_unowned_hit(key, cfg, track, run, start, end, util, step))
    return out


def _previous_owner(points: Sequence[GpuPoint], run: list[int], step: float) -> str:
    """The job holding the GPU in the bucket just before the run ('' if none or a gap)."""
    first = run[0]
    if first == 0:
        return ""
    before = points[first - 1]
    if before.owners and points[first].t - before.t <= 1.5 * step:
        return before.owners[0]
    return ""


def _unowned_hit(key: str, cfg: RuleConfig, track: GpuTrack, run: list[int], start: float,
                 end: float, util: float, step: float) -> Hit:
    pts = track.points
    fb = [v for i in run if (v := pts[i].fb_mib) is not None]
    busy = util >= param(cfg, "util_min")
    what = "busy" if busy else "holding memory"
    return Hit(key, cfg.severity, f"{track.host}:{track.gpu}",
               f"{track.host} GPU {track.gpu} {what} with no job", start, end,
               node=track.host, gpu=track.gpu, uuid=track.uuid, merge_gap=1.5 * step,
               evidence={"window": window(start, end), "mean_util": round(util, 3),
                         "max_util": round(max((pts[i].util or 0) for i in run), 3),
                         "min_fb_mib": round(min(fb)) if fb else None,
                         "buckets": len(run), "step_s": step, "model": track.model,
                         "signal": "no hpc_job label and no GPU binding"})


# --- 7. GPU memory left after a job; GPUs shared between users ------------------------------------


def gpu_memory_left_after_job(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Memory in use (>= fb_min_mib) on an idle GPU no job holds, starting right where a
    job's buckets end and lasting ``min_minutes``: a process the job left behind."""
    key = "gpu_memory_left_after_job"
    fb_min, util_below = param(cfg, "fb_min_mib"), param(cfg, "util_below")
    step, tracks = gpu_tracks(inputs)
    out = Outcome()
    for track in tracks:
        pts = track.points

        def keep(p: GpuPoint, track: GpuTrack = track) -> bool:
            return p.free and not quiet(allow, track.host, p, track) and \
                (p.fb_mib or 0) >= fb_min

        for run in runs(pts, keep, step):
            job = _previous_owner(pts, run, step)
            util = mean(pts[i].util for i in run) or 0.0
            if not job or util >= util_below or \
                    not long_enough(pts, run, step, param(cfg, "min_minutes")):
                continue
            start, end = span(pts, run, step)
            if reportable(inputs, end):
                out.hits.append(_left_hit(key, cfg, inputs, track, run, job, start, end, step))
    return out


def _left_hit(key: str, cfg: RuleConfig, inputs: Inputs, track: GpuTrack, run: list[int],
              job: str, start: float, end: float, step: float) -> Hit:
    alloc = inputs.allocation(job)
    fb = [track.points[i].fb_mib or 0 for i in run]
    return Hit(key, cfg.severity, f"{track.host}:{track.gpu}:{job}",
               f"{track.host} GPU {track.gpu} kept {round(min(fb) / 1024, 1)} GiB after job {job}",
               start, end, node=track.host, gpu=track.gpu, uuid=track.uuid,
               job_id=alloc.job_id if alloc else as_int(job), user=alloc.user if alloc else "",
               team=alloc.team if alloc else "", merge_gap=1.5 * step,
               evidence={"window": window(start, end), "after_job": job,
                         "min_fb_mib": round(min(fb)), "max_fb_mib": round(max(fb)),
                         "mean_util": round(mean(track.points[i].util for i in run) or 0, 3),
                         "buckets": len(run), "step_s": step})


def gpu_shared_between_users(inputs: Inputs, cfg: RuleConfig, allow: Allow) -> Outcome:
    """Stretches where one GPU is held by jobs of more than one user (outside MIG unless
    the policy is ``exclusive``)."""
    key = "gpu_shared_between_users"
    policy = param(cfg, "policy")
    step, tracks = gpu_tracks(inputs)
    out = Outcome()
    if policy == "shared":
        return out
    for track in tracks:
        pts = track.points

        def keep(p: GpuPoint) -> bool:
            return len(_users(inputs, p.together)) > 1 and (policy == "exclusive" or not p.mig)

        for run in runs(pts, keep, step):
            if not long_enough(pts, run, step, param(cfg, "min_minutes")):
                continue
            start, end = span(pts, run, step)
            jobs = sorted({j for i in run for j in pts[i].together})
            users = sorted(_users(inputs, jobs))
            if reportable(inputs, end):
                out.hits.append(Hit(
                    key, cfg.severity, f"{track.host}:{track.gpu}",
                    f"{track.host} GPU {track.gpu} shared by {len(users)} users", start, end,
                    node=track.host, gpu=track.gpu, uuid=track.uuid, merge_gap=1.5 * step,
                    evidence={"window": window(start, end), "jobs": jobs, "users": users,
                              "policy": policy, "mig": any(pts[i].mig for i in run)}))
    return out


def _users(inputs: Inputs, jobs: Iterable[str]) -> set[str]:
    """The users of the jobs we know (a job missing from the allocations counts for none)."""
    found = set()
    for job in jobs:
        alloc = inputs.allocation(job)
        if alloc is not None:
            found.add(alloc.user)
    return found
