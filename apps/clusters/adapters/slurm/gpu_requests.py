"""What GPUs a job asked for, where accounting does not say what it got.

A site whose ``AccountingStorageTRES`` does not list ``gres/gpu`` keeps no GPU count in its
job records. Slurm still knows what each job asked for:

- slurmctld's record (``squeue --json``, ``/slurm/<v>/jobs``) has the request as TRES:
  ``tres_per_job`` (``--gpus``), ``tres_per_node`` (``--gres``, ``--gpus-per-node``),
  ``tres_per_task`` (``--gpus-per-task``), ``tres_per_socket``, and ``gres_detail``, the
  indices it holds on each node (``gpu:h100:4(IDX:0-3)``): ``gpus_from_slurmctld``;
- slurmdbd's record keeps the command line (``submit_line``): ``gpus_from_submit_line``.

A GPU request is exact (Slurm allocates what was asked or does not start the job), so the
request of a job that started is its allocation. Each answer says where it came from
(``GpuSource``), and the job page shows that. When the command line is ambiguous (two
kinds of GPU option, a count that depends on something it does not say) the answer is
"unknown", never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apps.clusters.adapters.slurm import values
from apps.clusters.adapters.slurm.types import GpuSource

GpuRequest = tuple[int, dict[str, int], str]  # (GPUs, per model, GpuSource or "")
NONE: GpuRequest = (0, {}, "")

# How far each source can be trusted: what a job holds beats what it asked for, and the
# scheduler's view beats a command line read back from accounting.
_RANK: dict[str, int] = {
    GpuSource.ACCOUNTING: 5, GpuSource.GRES_DETAIL: 4, GpuSource.TRES_PER_JOB: 3,
    GpuSource.TRES_PER_NODE: 3, GpuSource.TRES_PER_TASK: 3, GpuSource.GPUS_PER_NODE: 3,
    GpuSource.SUBMIT_LINE: 2}


def rank(source: str) -> int:
    """How much a GPU count from ``source`` is worth against another's (0: none)."""
    return _RANK.get(source, 0)

# --- slurmctld's record -----------------------------------------------------------------


def _gpus_of(spec: str) -> tuple[int, dict[str, int]]:
    types = values.gpus_by_type(values.gres_items(spec))
    total = sum(types.values())
    return total, {k: v for k, v in types.items() if k and v}


def gpus_from_slurmctld(rec: Mapping[str, Any], nodes: int, tasks: int) -> GpuRequest:
    """The GPUs a running (or just finished) job holds, from slurmctld's record: its
    allocated TRES string when it counts GPUs, else ``gres_detail`` (what each node gave
    it), else the request (per job, per node times nodes, per task times tasks)."""
    alloc = values.parse_tres_string(values.text(rec.get("tres_alloc_str")))
    gpus, _, types = values.gpu_counts(alloc)
    if gpus:
        return gpus, types, GpuSource.ACCOUNTING
    detail = [values.text(d) for d in rec.get("gres_detail") or []]
    held = [_gpus_of(d) for d in detail]
    if sum(count for count, _ in held):
        merged: dict[str, int] = {}
        for _, per_model in held:
            for model, count in per_model.items():
                merged[model] = merged.get(model, 0) + count
        return sum(count for count, _ in held), merged, GpuSource.GRES_DETAIL
    return gpus_asked(rec, nodes, tasks)


def gpus_asked(rec: Mapping[str, Any], nodes: int, tasks: int) -> GpuRequest:
    """The GPUs slurmctld's record says the job asked for: per job, per node times nodes,
    per task times tasks (``tres_per_job``, ``tres_per_node``, ``tres_per_task``)."""
    for field, source, times in (("tres_per_job", GpuSource.TRES_PER_JOB, 1),
                                 ("tres_per_node", GpuSource.TRES_PER_NODE, nodes),
                                 ("tres_per_task", GpuSource.TRES_PER_TASK, tasks)):
        count, per_model = _gpus_of(values.text(rec.get(field)))
        if count and times:
            return count * times, {k: v * times for k, v in per_model.items()}, source
    return NONE


# --- slurmdbd's submit_line -----------------------------------------------------------------

# Options that take no value (so the word after them is not theirs).
_FLAGS = {"--exclusive", "--hold", "-H", "--parsable", "--requeue", "--no-requeue",
          "--wait", "-W", "--test-only", "--overcommit", "-O", "--contiguous", "--pty",
          "--no-kill", "-k", "--quiet", "-Q", "--verbose", "-v", "--spread-job",
          "--use-min-nodes", "--ignore-pbs", "--x11", "--kill-on-invalid-dep=yes"}
_LAUNCHERS = {"srun", "mpirun", "mpiexec", "torchrun", "accelerate", "deepspeed"}
_COUNTED = {  # option -> what it multiplies
    "--gpus": "job", "-G": "job", "--gres": "node", "--gpus-per-node": "node",
    "--gpus-per-task": "task", "--gpus-per-socket": "socket"}
_SHAPE = {"--nodes": "nodes", "-N": "nodes", "--ntasks": "tasks", "-n": "tasks",
          "--ntasks-per-node": "tasks_per_node", "--sockets-per-node": "sockets"}


def _options(line: str) -> list[tuple[str, str]] | None:
    """(option, value) pairs of the submitting command, in order; None when the line is
    not a Slurm command. Stops at the script or the command to run; the words of a
    ``--wrap`` stand for one value up to the next option, and what follows a launcher
    (srun...) inside it is the launcher's, not the job's."""
    words = line.split()
    if not words or words[0].rsplit("/", 1)[-1] not in ("sbatch", "salloc", "srun"):
        return None
    out: list[tuple[str, str]] = []
    i, in_wrap = 1, False
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            if not in_wrap:
                break  # the script or command: the rest are its arguments
            if word.rsplit("/", 1)[-1] in _LAUNCHERS:
                break  # the rest is the launcher's command line
            i += 1
            continue
        name, eq, value = word.partition("=")
        if name == "--wrap":  # its words follow (or one follows "="): read them as words
            in_wrap = True
            if eq and value.rsplit("/", 1)[-1] in _LAUNCHERS:
                break
            i += 1
            continue
        if not eq and name[:2] in ("-G", "-N", "-n") and len(name) > 2 and name[1] != "-":
            name, value, eq = name[:2], name[2:], "="  # -N2, -G4
        if not eq and word not in _FLAGS and i + 1 < len(words):
            value = words[i + 1]
            i += 1
        out.append((name, value))
        i += 1
    return out


def gpus_from_submit_line(line: str, nodes: int) -> GpuRequest:
    """The GPUs the sbatch/salloc/srun command line asked for (``submit_line``), with the
    job's node count; NONE when it asked none or cannot be read unambiguously."""
    options = _options(line)
    if not options:
        return NONE
    asks = [(name, value) for name, value in options if name in _COUNTED
            and (name != "--gres" or any(g.name == "gpu" for g in values.gres_items(value)))]
    kinds = {_COUNTED[name] for name, _ in asks}
    if len(kinds) != 1 or len({value for _, value in asks}) != 1:
        return NONE  # none, or two kinds of GPU request: ambiguous
    name, value = asks[0]
    per, types = _gpus_of(value if name == "--gres" else f"gpu:{value}")
    shape = {_SHAPE[n]: v for n, v in options if n in _SHAPE}
    times = _multiplier(kinds.pop(), shape, nodes)
    if not per or times is None:
        return NONE
    return per * times, {k: v * times for k, v in types.items()}, GpuSource.SUBMIT_LINE


def _multiplier(kind: str, shape: Mapping[str, str], nodes: int) -> int | None:
    def number(key: str) -> int | None:
        raw = shape.get(key, "").split("-")[0]  # --nodes=2-4: the job's node count decides
        return int(raw) if raw.isdigit() else None

    if kind == "job":
        return 1
    if kind == "node":
        return nodes or number("nodes") or 1
    if kind == "task":
        tasks = number("tasks")
        per_node = number("tasks_per_node")
        if tasks is None and per_node is not None:
            tasks = per_node * (nodes or number("nodes") or 1)
        return tasks if tasks is not None else (1 if not shape.get("tasks") else None)
    # per socket: Slurm allocates on the sockets the tasks land on, not every socket asked
    # for (24.11.7: --gpus-per-socket 2 --sockets-per-node 2 held 2 GPUs): unknown
    return None
