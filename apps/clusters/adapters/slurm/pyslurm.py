"""The ``pyslurm`` Slurm backend, for sites whose Slurm matches PyPI's pyslurm (25.11).

**Untested here.** PyPI's pyslurm 25.11 refuses to build against Slurm 22.05 ("Slurm version
mismatch"), so this module has never run against a real cluster in Beacon's CI; only the
pure mapping ``job_from_pyslurm`` is unit-tested, on a dict shaped like pyslurm's documented
``pyslurm.db.Job.to_dict()``. Prefer the ``cli`` backend, which is tested end to end.

``pyslurm`` is imported inside the methods, so importing this module (the registry does)
never imports it.
Not offered through pyslurm: GPU index bindings, associations and fairshare (use ``cli``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apps.clusters.adapters.slurm import parse
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm import types as st
from apps.core.errors import AdapterError, TransientAdapterError


def _pyslurm() -> Any:
    try:
        import pyslurm  # only now: this backend was selected
    except ImportError as exc:
        raise AdapterError("the pyslurm backend needs the pyslurm package (Slurm 25.11)",
                           service="slurm") from exc
    return pyslurm


def _ts(value: Any) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if isinstance(value, int) and value > 0 else None


def _as_dict(job: Any) -> dict[str, Any]:
    data = job.to_dict() if hasattr(job, "to_dict") else job.as_dict()
    return dict(data)


def job_from_pyslurm(d: Mapping[str, Any]) -> st.SlurmJob:
    """Map one ``pyslurm.db.Job.to_dict()`` to a ``SlurmJob``.

    pyslurm decodes the database's exit code itself (``exit_code``/``exit_code_signal``),
    so the 22.05 JSON bug does not apply. GPUs need the allocated TRES string, which
    pyslurm exposes as ``tres_alloc_str`` in the versions that have it.
    """
    state = parse._state(d.get("state"))
    tres = parse.parse_tres_string(str(d.get("tres_alloc_str") or ""))
    gpus, shards, types = parse._gpu_counts(tres)
    job_id = int(d["id"])
    array_job = d.get("array_id") or None
    task = d.get("array_task_id")
    pending = str(d.get("array_tasks_waiting") or "") if task is None else ""
    submit = _ts(d.get("submit_time"))
    if submit is None:
        raise ValueError("no submit_time")
    finished = state not in st.ACTIVE_STATES
    return st.SlurmJob(
        job_id=job_id,
        display_id=parse._display_id(job_id, array_job, task, pending, None, None),
        cluster=str(d.get("cluster") or ""), submit_time=submit,
        name=str(d.get("name") or ""), user_name=str(d.get("user_name") or ""),
        account=str(d.get("account") or ""), partition=str(d.get("partition") or ""),
        qos=str(d.get("qos") or ""), work_dir=str(d.get("working_directory") or ""),
        comment=str(d.get("comment") or ""), state=state,
        reason=str(d.get("state_reason") or "") if state == "PENDING" else "",
        wait_reason=(str(d.get("state_reason") or "")
                     if state != "PENDING" and d.get("state_reason") != "None" else ""),
        exit=(st.ExitStatus(int(d.get("exit_code") or 0), int(d.get("exit_code_signal") or 0))
              if finished else None),
        eligible_time=_ts(d.get("eligible_time")), start_time=_ts(d.get("start_time")),
        end_time=_ts(d.get("end_time")) if finished else None,
        time_limit_min=d.get("time_limit") if isinstance(d.get("time_limit"), int) else None,
        array_job_id=array_job, array_task_id=task, array_tasks_pending=pending,
        nodes=str(d.get("nodelist") or ""), node_count=int(tres.get("node", 0)),
        cpus=int(tres.get("cpu", 0)), memory_mb=int(tres.get("mem", 0)),
        gpus=gpus, gpu_shards=shards, gpu_types=types,
        tres_alloc=str(d.get("tres_alloc_str") or ""),
    )


@dataclass
class SlurmPyslurm:
    """Talks to slurmctld/slurmdbd through pyslurm (see the module docstring)."""

    cluster: str = ""

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmPyslurm:
        _pyslurm()  # fail at configuration time, with a clear message
        return cls(cluster=str(options.get("cluster", "")))

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # pyslurm raises RPCError for daemons that are down
            raise TransientAdapterError(f"pyslurm {what}: {exc}", service="slurm") from exc

    def _jobs(self, **filters: Any) -> Iterator[st.SlurmJob | st.RecordError]:
        ps = _pyslurm()
        if self.cluster:
            filters["clusters"] = [self.cluster]
        jobs = self._call("db jobs", ps.db.Jobs.load, ps.db.JobFilter(**filters))
        for index, job in enumerate(jobs):
            data = _as_dict(job)
            try:
                yield job_from_pyslurm(data)
            except (KeyError, ValueError, TypeError) as exc:
                yield st.RecordError(index, data.get("id"), f"{type(exc).__name__}: {exc}")

    def change_marker(self) -> str:
        # No cheap counter is exposed: the newest submit time among loaded jobs stands in.
        jobs = self._call("jobs", _pyslurm().Jobs.load)
        return f"{len(jobs)}:{max((j.submit_time or 0 for j in jobs.values()), default=0)}"

    def jobs_since(self, since: datetime | None) -> Iterator[st.SlurmJob | st.RecordError]:
        start = int(since.timestamp()) if since else 0
        return self._jobs(start_time=start, end_time=int(datetime.now(tz=UTC).timestamp()))

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[st.SlurmJob | st.RecordError]:
        return self._jobs(ids=[int(i) for i in job_ids])

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, st.ExitStatus]:
        return {j.job_id: j.exit for j in self._jobs(ids=[int(i) for i in job_ids])
                if isinstance(j, st.SlurmJob) and j.exit is not None}

    def queue(self) -> list[st.QueueEntry]:
        jobs = self._call("jobs", _pyslurm().Jobs.load)
        out = []
        for job in jobs.values():
            state = parse._state(job.state)
            pending = state == "PENDING"
            if state in st.ACTIVE_STATES:
                out.append(st.QueueEntry(
                    job_id=int(job.id), state=state, user_name=str(job.user_name or ""),
                    reason=str(job.state_reason or "") if pending else "",
                    estimated_start=_ts(job.start_time) if pending else None))
        return out

    def nodes(self) -> list[st.SlurmNode]:
        nodes = self._call("nodes", _pyslurm().Nodes.load)
        return [st.SlurmNode(name=n.name, state=str(n.state).lower(),
                             partitions=tuple(n.partitions),
                             cpus=int(n.total_cpus or 0), memory_mb=int(n.real_memory or 0),
                             gpu_type=cparse._gres_total(str(n.configured_gres or ""))[0],
                             gpu_count=cparse._gres_total(str(n.configured_gres or ""))[1],
                             reason=str(n.reason or "")) for n in nodes.values()]

    def partitions(self) -> list[st.SlurmPartition]:
        parts = self._call("partitions", _pyslurm().Partitions.load)
        return [st.SlurmPartition(name=p.name, state=str(p.state).lower(),
                                  is_default=bool(p.is_default), nodes=str(p.nodes or ""),
                                  max_time_min=p.max_time if isinstance(p.max_time, int) else None)
                for p in parts.values()]

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Scripts by display id (``4_0``), as the interface says: the labels look them up
        by the job's display id. A record that cannot be mapped keeps its raw id."""
        ps = _pyslurm()
        jobs = self._call("db jobs", ps.db.Jobs.load,
                          ps.db.JobFilter(ids=[int(i) for i in job_ids], with_script=True))
        out: dict[str, str] = {}
        for job in jobs:
            script = getattr(job, "script", None)
            if not script:
                continue
            try:
                key = job_from_pyslurm(_as_dict(job)).display_id
            except (KeyError, ValueError, TypeError):
                key = str(job.id)
            out[key] = str(script)
        return out

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        raise self._unsupported("the stored job environment")

    def _unsupported(self, what: str) -> AdapterError:
        return AdapterError(f"{what} is not available through the pyslurm backend: use cli",
                            service="slurm")

    def gpu_bindings(self) -> list[st.GpuBinding]:
        raise self._unsupported("GPU index binding")

    def associations(self) -> list[st.Association]:
        raise self._unsupported("associations")

    def shares(self) -> list[st.ShareRow]:
        raise self._unsupported("fairshare")

    def account_limits(self, account: str) -> st.Association | None:
        raise self._unsupported("associations")

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[st.UsageRow]:
        raise self._unsupported("usage reports")

    def job_allocations(self, start: datetime, end: datetime) -> list[st.JobAllocation]:
        raise self._unsupported("window allocations")

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> st.LimitChange:
        raise self._unsupported("quota writes")

    def cancel_job(self, job_id: int) -> None:
        raise self._unsupported("cancelling jobs")

    def cannot(self, action: st.Action) -> str:
        what = {st.Action.QUOTA_PREVIEW: "quota previews (associations)",
                st.Action.QUOTA_WRITE: "quota writes", st.Action.RECONCILE: "usage reports",
                st.Action.CANCEL: "cancelling jobs"}
        return str(self._unsupported(what[action]))

    def accounted_until(self) -> datetime | None:
        return None
