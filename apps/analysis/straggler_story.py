"""One story per job when telemetry and a profiler trace both name a straggler (pure).

Telemetry names a GPU (``host:index``: it waited least while its peers waited for it, with
or without hardware evidence such as thermal throttling); a trace names a rank and the
phase where it lost the time. Shown apart they read as two verdicts with two owners ("drain
the node, call hardware" and "this is in the code, talk to the researcher"), although they
are usually one fact seen twice. The trace says which GPU each rank ran on (its kernels'
device, its host), so the two can be joined:

- the same GPU, with hardware evidence: the GPU is at fault, the slow phase is where it
  shows; one owner, the hardware contact;
- the same GPU, without: the rank does more work, in the code; one owner, the researcher
  (or the data contact when the phase is data loading);
- different GPUs: the two disagree; the trace measures every step, telemetry averages
  scrape windows (and may cover another part of the job), so the verdict follows the trace
  and says so.

When the trace cannot say where the rank ran (a CPU trace, no GPU events), nothing is
joined and both findings stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apps.analysis.diagnosis import EvidenceItem, Finding

KEY = "straggler-story"
# the default rules whose findings the story replaces (apps/jobs/diagnosis_defaults.py)
STRAGGLER_RULES = frozenset({"slow-gpu-hardware", "straggler-no-hardware", "slow-compute-rank",
                             "slow-optimizer-rank", "slow-data-rank"})

PHASE_HINTS = {
    "data_loading": "Check that rank's data shard and input pipeline (its node's local disk, "
                    "CPU load, DataLoader workers).",
    "forward": "Check that rank's inputs (sequence lengths, batch composition): uneven "
               "shards give one rank more compute.",
    "backward": "Check that rank's inputs (sequence lengths, batch composition) and any "
                "hook that runs on it alone (gradient logging, a periodic checkpoint).",
    "optimizer": "Check for extra work after backward on that rank alone (EMA, logging, "
                 "gradient clipping, checkpointing).",
}
OTHER_HINT = ("Check what that rank does in '{phase}' that the others do not (logging, "
              "evaluation, checkpointing on one rank).")
HARDWARE_HINT = ("Drain the node and test the GPU (dcgmi diag -r 3; nvidia-smi -q for clocks, "
                 "temperature and throttle reasons) and its cooling; the code need not change.")


@dataclass(frozen=True)
class TraceStraggler:
    """The trace's straggler: its rank, phase, excess per step and the GPU it ran on."""

    rank: int
    phase: str
    excess_ms: float
    gpu: str  # host:index as telemetry names GPUs ('' when the trace does not say)
    intermittent: bool = False
    steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class TelemetryStraggler:
    """Telemetry's verdict: the GPUs named, and the hardware evidence on the first."""

    gpus: tuple[str, ...]
    hardware: bool
    cause: str  # e.g. "thermal throttling"; '' without hardware evidence


def short_host(host: str) -> str:
    """A node's name as Slurm and telemetry give it: the host name before the first dot."""
    return host.split(".", 1)[0]


def rank_gpu(host: str, index: int | None, job_nodes: Sequence[str]) -> str:
    """The GPU a rank ran on, named as telemetry names it (``host:index``).

    A trace without a host (no Kineto ``host_name``, a renamed file) still names the device:
    on a one-node job that is enough. Otherwise ''.
    """
    if index is None:
        return ""
    if host:
        return f"{short_host(host)}:{index}"
    return f"{job_nodes[0]}:{index}" if len(job_nodes) == 1 else ""


def one_story(trace: TraceStraggler | None,
              telemetry: TelemetryStraggler | None) -> Finding | None:
    """The single finding that replaces the straggler findings, or ``None`` (nothing to join)."""
    if trace is None or telemetry is None or not telemetry.gpus or not trace.gpu:
        return None
    same = trace.gpu in telemetry.gpus
    where = _where(trace)
    evidence = (
        EvidenceItem("straggler_gpu", "telemetry's straggler GPU", ", ".join(telemetry.gpus),
                     ", ".join(telemetry.gpus), "stragglers"),
        EvidenceItem("trace_straggler_rank", "trace's straggler rank",
                     str(trace.rank), f"rank {trace.rank} on GPU {trace.gpu}", "phases"),
        EvidenceItem("trace_excess_ms", "its extra work per step", trace.excess_ms,
                     f"{trace.excess_ms:.1f} ms in {trace.phase}", "phases"),
    )
    if same and telemetry.hardware:
        return Finding(
            KEY, "hardware", "critical",
            f"Rank {trace.rank} is slow because its GPU {trace.gpu} is ({telemetry.cause})",
            f"Telemetry and the profiler trace tell one story: rank {trace.rank} runs on GPU "
            f"{trace.gpu}, which shows {telemetry.cause}. The trace measures its "
            f"{trace.phase} {trace.excess_ms:.1f} ms longer per step than the other ranks'"
            f"{where}, and they wait for it in every collective. The GPU, not the code, is "
            f"at fault.", HARDWARE_HINT, evidence)
    hint = PHASE_HINTS.get(trace.phase, OTHER_HINT.format(phase=trace.phase))
    area = "data" if trace.phase == "data_loading" else "code"
    if same:
        return Finding(
            KEY, area, "warning",
            f"Rank {trace.rank} (GPU {trace.gpu}) does more work than the others",
            f"Telemetry and the profiler trace tell one story: rank {trace.rank} runs on GPU "
            f"{trace.gpu}, which shows no sign of a hardware problem; its {trace.phase} takes "
            f"{trace.excess_ms:.1f} ms more per step than the other ranks'{where}, and they "
            f"wait for it. The extra work is in the {_owner_words(area)}.", hint, evidence)
    return Finding(
        KEY, area, "warning",
        f"Telemetry and the trace disagree: the trace's rank {trace.rank} ran on GPU "
        f"{trace.gpu}",
        f"Telemetry names GPU {', '.join(telemetry.gpus)}; the profiler trace names rank "
        f"{trace.rank}, which ran on GPU {trace.gpu}, {trace.excess_ms:.1f} ms slower per step "
        f"in {trace.phase}{where}. The trace measures every step it recorded, telemetry "
        f"averages each scrape window and may cover another part of the job: the verdict "
        f"follows the trace.",
        hint + " If the two should agree, trace the job again over a longer window and "
               "compare when the trace was recorded with the telemetry's window.", evidence)


def merge(findings: Sequence[Finding], story: Finding | None) -> tuple[Finding, ...]:
    """The findings with the straggler ones replaced by the story, where the first stood."""
    if story is None:
        return tuple(findings)
    kept = [f for f in findings if f.rule not in STRAGGLER_RULES]
    first = next((i for i, f in enumerate(findings) if f.rule in STRAGGLER_RULES), None)
    at = len(kept) if first is None else sum(1 for f in findings[:first]
                                             if f.rule not in STRAGGLER_RULES)
    return (*kept[:at], story, *kept[at:])


def _where(trace: TraceStraggler) -> str:
    if not trace.intermittent:
        return ""
    steps = ", ".join(f"#{n}" for n in trace.steps[:8])
    return f" on steps {steps} only (an intermittent straggler)"


def _owner_words(area: str) -> str:
    return "input pipeline or data of that rank" if area == "data" else "code"
