"""Small builders for security rule fixtures: tracks, allocations, inputs, tokens.

Token-shaped strings are generated at run time (never literal in the repository): a
committed string shaped like a real token would trip every secret scanner downstream.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from typing import Any

from apps.analysis.security_rules import config
from apps.analysis.security_types import (
    Allocation,
    Allow,
    Frame,
    GpuPoint,
    GpuTrack,
    Inputs,
    NodePoint,
    NodeTrack,
    RuleConfig,
)

STEP = 60.0
T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z, a Monday afternoon
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def t(i: int, start: float = T0, step: float = STEP) -> float:
    """The end of bucket ``i``."""
    return start + (i + 1) * step


def points(n: int, start: float = T0, step: float = STEP, **fields: Any) -> list[GpuPoint]:
    """``n`` GPU buckets; a field may be a value or a function of the bucket index."""
    return [GpuPoint(t(i, start, step), **{k: v(i) if callable(v) else v
                                          for k, v in fields.items()}) for i in range(n)]


def node_points(n: int, start: float = T0, step: float = STEP, **fields: Any) -> list[NodePoint]:
    return [NodePoint(t(i, start, step), **{k: v(i) if callable(v) else v
                                           for k, v in fields.items()}) for i in range(n)]


def gpu(pts: Sequence[GpuPoint], host: str = "gpu01", index: int = 0,
        model: str = H100) -> GpuTrack:
    return GpuTrack(host, index, f"GPU-{host}-{index}", model, tuple(pts))


def node(pts: Sequence[NodePoint], host: str = "gpu01") -> NodeTrack:
    return NodeTrack(host, tuple(pts))


def job(job_id: int, user: str = "bob", nodes: Sequence[str] = ("gpu01",), start: float = T0,
        end: float = T0 + 3600, gpus: int = 1, team: str = "nlp") -> Allocation:
    return Allocation(job_id, user, team, frozenset(nodes), start, end, gpus, str(job_id))


def inputs(gpus: Sequence[GpuTrack] = (), nodes: Sequence[NodeTrack] = (),
           allocations: Sequence[Allocation] = (), step: float = STEP, start: float = T0 - 1,
           end: float = T0 + 30 * 86400, **kw: Any) -> Inputs:
    frame = Frame(step, tuple(gpus), tuple(nodes)) if gpus or nodes else None
    return Inputs(start, end, frame, tuple(allocations), **kw)


def cfg(key: str, **params: Any) -> RuleConfig:
    return config(key, params=params)


def run(key: str, data: Inputs, allow: Allow | None = None, **params: Any) -> list[Any]:
    from apps.analysis.security_rules import run as run_rule

    return run_rule(key, data, cfg(key, **params), allow or Allow()).hits


def hf_token(rng: random.Random) -> str:
    return "hf" + "_" + "".join(rng.choice(string.ascii_letters) for _ in range(34))


def github_token(rng: random.Random) -> str:
    return "gh" + "p_" + "".join(rng.choice(string.ascii_letters + string.digits)
                                 for _ in range(36))


def aws_key_id(rng: random.Random) -> str:
    return "AK" + "IA" + "".join(rng.choice(string.ascii_uppercase + string.digits)
                                 for _ in range(16))


def google_key(rng: random.Random) -> str:
    return "AI" + "za" + "".join(rng.choice(string.ascii_letters + string.digits + "_-")
                                 for _ in range(35))


def slack_token(rng: random.Random) -> str:
    return "xo" + "xb-" + "-".join("".join(rng.choice(string.digits) for _ in range(12))
                                   for _ in range(2)) + "-" + \
        "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


def pem_header() -> str:
    return "-----BEGIN " + "RSA PRIVATE" + " KEY-----"


def random_password(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(14))


TOKENS: dict[str, Callable[[random.Random], str]] = {
    "huggingface": hf_token, "github": github_token, "aws_access_key": aws_key_id,
    "google_api_key": google_key, "slack": slack_token,
}
