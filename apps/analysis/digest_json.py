"""Rank digests and phase configs as JSON, and back, exactly (pure; issue 29 item 4).

A job's ranks are read by several tasks, each storing its files' ``RankDigest``s, and one
last task compares them: what it reads back must be what was cut, or the fan-out would
answer differently from one task reading every file. So:

- every float is kept as Python wrote it (JSON's shortest repr reads back bit for bit);
- mappings are lists of ``[key, value]`` pairs: PostgreSQL's ``jsonb`` reorders object
  keys, and the order of a step's phases (``PHASES`` first, then annotations) is kept;
- tuples come back as tuples, so a digest read back compares equal to the one stored.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from apps.analysis.gpu_timeline import GpuStep
from apps.analysis.rank_digest import RankDigest
from apps.analysis.step_phases import PhaseConfig, RankSteps, StepPhases
from apps.analysis.trace_types import DistributedInfo, Origin

Json = dict[str, Any]


def config_to_json(config: PhaseConfig) -> Json:
    """The config's fields, its annotation map as pairs."""
    data = asdict(config)
    data["annotation_phases"] = [list(item) for item in config.annotation_phases.items()]
    return data


def config_from_json(data: Json) -> PhaseConfig:
    return PhaseConfig(**{**data, "annotation_phases": dict(data["annotation_phases"])})


def digest_to_json(digest: RankDigest) -> Json:
    """One rank's digest without its config (stored once for the whole job)."""
    cut = digest.cut
    return {
        "source": digest.source, "sha256": digest.sha256,
        "distributed": asdict(digest.distributed) if digest.distributed else None,
        "origin": asdict(digest.origin),
        "span_us": list(digest.span_us) if digest.span_us else None,
        "cut": {"source": cut.source, "timeline": cut.timeline,
                "warnings": list(cut.warnings), "steps": [_step(s) for s in cut.steps]},
    }


def digest_from_json(data: Json, config: PhaseConfig) -> RankDigest:
    """The digest ``digest_to_json`` wrote, cut under ``config``."""
    dist, span, cut = data["distributed"], data["span_us"], data["cut"]
    return RankDigest(
        source=data["source"], sha256=data["sha256"],
        distributed=None if dist is None else DistributedInfo(
            **{**dist, "group_ranks": tuple(dist["group_ranks"])}),
        origin=Origin(**{**data["origin"], "devices": tuple(data["origin"]["devices"])}),
        span_us=None if span is None else (span[0], span[1]),
        cut=RankSteps(source=cut["source"], timeline=cut["timeline"],
                      warnings=tuple(cut["warnings"]),
                      steps=tuple(_step_from(s) for s in cut["steps"])),
        config=config)


def _step(step: StepPhases) -> Json:
    return {"step": step.step, "start": step.start, "end": step.end,
            "phases_ms": [list(item) for item in step.phases_ms.items()],
            "gpu": asdict(step.gpu) if step.gpu else None}


def _step_from(data: Json) -> StepPhases:
    gpu = data["gpu"]
    return StepPhases(step=data["step"], start=data["start"], end=data["end"],
                      phases_ms=dict(data["phases_ms"]),
                      gpu=None if gpu is None else GpuStep(**gpu))
