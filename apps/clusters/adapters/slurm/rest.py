"""The ``rest`` Slurm backend: slurmrestd with JWT, OpenAPI plugin versions v0.0.38 and v0.0.37.

Bodies have the shape of ``sacct/squeue/sinfo --json`` and go through the same parsers. A
version is a row in ``API_VERSIONS`` (its URL prefixes); a newer one (v0.0.39+, Slurm 23.02)
adds a row plus whatever its data parser changed (wrapped numbers and state lists are
already accepted by ``parse``).

Options (``Cluster.slurm_settings``): ``url`` ("http://127.0.0.1:6820"), ``user`` (the
``X-SLURM-USER-NAME``), ``token`` or ``token_file`` (a JWT from ``scontrol token``; the file
is read each time a client is built, so it can be rotated), ``version`` ("v0.0.38"),
``timeout`` (seconds, default 30), ``cluster`` (restricts slurmdbd queries to one cluster:
without it slurmdbd answers for every cluster it knows).

Not available over REST in 22.05: ``sshare`` (``shares()`` raises ``AdapterError``) and
batch scripts (``job_scripts()`` returns nothing, so REST clusters get no AI labels).
v0.0.37's job records give the eligible time as ``start``: the start is rebuilt from
``elapsed`` (``_start_from_elapsed``). Exit codes: slurmdbd's JSON has the 22.05 bug in both
versions, so ``exit_codes`` reads slurmctld's raw wait status, which exists only while the
job is still in slurmctld's memory (``MinJobAge``, 300 s by default): sync at least that often.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from apps.clusters.adapters.slurm import parse, parse_gpus
from apps.clusters.adapters.slurm import parse_cluster as cparse
from apps.clusters.adapters.slurm import types as st
from apps.core.errors import AdapterError, TransientAdapterError


@dataclass(frozen=True)
class ApiVersion:
    """URL prefixes of one OpenAPI plugin version, and the ``state`` filter that makes a
    window query include jobs that never became eligible (held, then cancelled), as
    ``sacct -s`` does; None where the version ignores the filter.

    ``start_is_eligible``: the version's ``time.start`` is really the eligible time (22.05.8's
    dbv0.0.37, seen against the real slurmdbd and in the recordings), so the start is
    rebuilt from ``elapsed`` (see ``_start_from_elapsed``).
    """

    slurm: str
    slurmdb: str
    window_states: str | None = None
    start_is_eligible: bool = False


_STATES = ("pending,running,suspended,completed,cancelled,failed,timeout,node_fail,"
           "preempted,boot_fail,deadline,out_of_memory")  # "requeued" does not parse
API_VERSIONS = {
    "v0.0.38": ApiVersion("/slurm/v0.0.38", "/slurmdb/v0.0.38", _STATES),
    "v0.0.37": ApiVersion("/slurm/v0.0.37", "/slurmdb/v0.0.37", start_is_eligible=True),
}
_ID_CHUNK = 200
_TRANSIENT_STATUS = {500, 502, 503, 504}  # slurmrestd answers 500 when slurmctld/dbd is down


def _start_from_elapsed(now: float, rec: dict[str, Any]) -> None:
    """dbv0.0.37's start for a job that started: its end (or, still running, the time of the
    answer) minus the elapsed and suspended seconds, which slurmdbd computes from the true
    start. Exact for finished jobs (a job cancelled before it started gets start = end, as
    sacct prints it); within a second for running ones. A pending job keeps no start."""
    times = rec.get("time")
    if not isinstance(times, dict):
        return
    end, elapsed, suspended = times.get("end"), times.get("elapsed"), times.get("suspended")
    if type(elapsed) is not int:
        return
    held = suspended if type(suspended) is int else 0
    if type(end) is int and end > 0:
        times["start"] = end - elapsed - held
    elif times.get("start"):  # running (or suspended): the eligible time stands in for it
        times["start"] = round(now) - elapsed - held


def _read_token(options: Mapping[str, Any]) -> str:
    if options.get("token"):
        return str(options["token"]).strip()
    token_file = options.get("token_file")
    if not token_file:
        raise AdapterError("slurmrestd needs a token or token_file", service="slurm")
    try:
        text = Path(str(token_file)).read_text().strip()
    except OSError as exc:
        raise AdapterError(f"cannot read token_file {token_file}: {exc}", service="slurm") from exc
    return text.removeprefix("SLURM_JWT=")  # `scontrol token` prints SLURM_JWT=...


# What 22.05's slurmrestd cannot do, in the words the pages show before a button is pressed.
CANNOT = {
    st.Action.QUOTA_PREVIEW: "slurmrestd 22.05 cannot rehearse a limit change (sacctmgr's dry "
                          "run): previews and quota writes need the cli backend",
    st.Action.QUOTA_WRITE: "quota writes need the cli backend (sacctmgr): slurmrestd 22.05 "
                        "would rewrite the whole association",
    st.Action.RECONCILE: "slurmrestd 22.05 has no usage report (sreport): reconcile with the "
                      "cli backend",
}


@dataclass
class SlurmRest:
    """Talks to slurmrestd over HTTP with a JWT (see the module docstring)."""

    url: str
    user: str
    token: str
    version: str = "v0.0.38"
    timeout: float = 30.0
    cluster: str = ""

    def __post_init__(self) -> None:
        if self.version not in API_VERSIONS:
            raise AdapterError(f"slurmrestd version {self.version!r} is not supported "
                               f"(use one of {', '.join(API_VERSIONS)})", service="slurm")
        self.api = API_VERSIONS[self.version]
        self.session = requests.Session()
        # No library retries: Celery retries the whole task with backoff.
        self.session.mount("http://", HTTPAdapter(max_retries=0))
        self.session.mount("https://", HTTPAdapter(max_retries=0))
        self.session.headers.update({"X-SLURM-USER-NAME": self.user,
                                     "X-SLURM-USER-TOKEN": self.token})

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmRest:
        if not options.get("url"):
            raise AdapterError("slurmrestd needs a url", service="slurm")
        return cls(url=str(options["url"]).rstrip("/"), user=str(options.get("user", "")),
                   token=_read_token(options), version=str(options.get("version", "v0.0.38")),
                   timeout=float(options.get("timeout", 30)),
                   cluster=str(options.get("cluster", "")))

    # --- HTTP --------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str] | None = None,
             stream: bool = False) -> requests.Response:
        try:
            resp = self.session.get(f"{self.url}{path}", params=params, stream=stream,
                                    timeout=(min(self.timeout, 10), self.timeout))
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise TransientAdapterError(f"slurmrestd unreachable at {self.url}: {exc}",
                                        service="slurm") from exc
        except requests.RequestException as exc:
            raise AdapterError(f"slurmrestd request failed: {exc}", service="slurm") from exc
        if resp.status_code != 200:
            self._fail(path, resp)
        return resp

    @staticmethod
    def _fail(path: str, resp: requests.Response) -> None:
        body = resp.text[:2000]
        message = f"slurmrestd {path} answered HTTP {resp.status_code}: {body[:200].strip()}"
        if resp.status_code in (401, 403):
            message = f"slurmrestd refused the token (HTTP {resp.status_code}): check user/token"
        transient = resp.status_code in _TRANSIENT_STATUS and "Unable to parse" not in body
        error = TransientAdapterError if transient else AdapterError
        raise error(message, service="slurm", detail=body)

    def _json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        resp = self._get(path, params)
        try:
            data = resp.json()
        except ValueError as exc:
            raise AdapterError(f"slurmrestd {path} sent invalid JSON", service="slurm",
                               detail=resp.text[:2000]) from exc
        if not isinstance(data, dict):
            raise AdapterError(f"slurmrestd {path} sent JSON that is not an object",
                               service="slurm")
        self._raise_errors(path, data.get("errors"))
        return data

    @staticmethod
    def _raise_errors(path: str, errors: Any) -> None:
        if errors:
            text = json.dumps(errors)[:2000]
            raise TransientAdapterError(f"slurmrestd {path} reported errors: {text[:200]}",
                                        service="slurm", detail=text)

    def _stream_jobs(self, params: dict[str, str]) -> Iterator[st.SlurmJob | st.RecordError]:
        """Stream ``/slurmdb/.../jobs`` through the sacct parser (bounded memory).

        slurmrestd answers 200 with an ``errors`` list when slurmdbd fails behind it (and
        sometimes no jobs at all): that is a failed read, never an empty window. Errors
        sent before the jobs stop the stream at once; errors after them fail it at the end.
        """
        params = {"skip_steps": "true", **params}
        if self.cluster:
            params["cluster"] = self.cluster
        path = f"{self.api.slurmdb}/jobs"
        members: dict[str, Any] = {}
        with self._get(path, params, stream=True) as resp:
            resp.raw.decode_content = True
            prepare = partial(_start_from_elapsed, time.time()) \
                if self.api.start_is_eligible else None
            for item in parse.iter_sacct_json(resp.raw, members, prepare):
                self._raise_errors(path, members.get("errors"))
                yield item
        self._raise_errors(path, members.get("errors"))

    # --- the SlurmClient interface -------------------------------------------------------

    def change_marker(self) -> str:
        try:
            return cparse.diag_marker(self._json(f"{self.api.slurm}/diag"))
        except ValueError as exc:
            raise AdapterError(f"slurmrestd diag: {exc}", service="slurm") from exc

    def jobs_since(self, since: datetime | None) -> Iterator[st.SlurmJob | st.RecordError]:
        # sacct-style times only (epoch gives HTTP 500); relative avoids time zones.
        if since is None:
            start = "2000-01-01T00:00:00"  # slurmrestd cannot parse 1970
        else:
            start = f"now-{max(0, int((datetime.now(tz=UTC) - since).total_seconds()))}seconds"
        params = {"start_time": start, "end_time": "now"}
        if self.api.window_states:
            params["state"] = self.api.window_states
        return self._stream_jobs(params)

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[st.SlurmJob | st.RecordError]:
        ids = [int(i) for i in job_ids]
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start:start + _ID_CHUNK]
            yield from self._stream_jobs({"step": ",".join(map(str, chunk))})

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, st.ExitStatus]:
        wanted = {int(i) for i in job_ids}
        entries = parse.parse_squeue_json(self._json(f"{self.api.slurm}/jobs"))
        return {e.job_id: e.exit for e in entries if e.job_id in wanted and e.exit is not None}

    def queue(self) -> list[st.QueueEntry]:
        entries = parse.parse_squeue_json(self._json(f"{self.api.slurm}/jobs"))
        return [e for e in entries if e.state in st.ACTIVE_STATES]

    def gpu_bindings(self) -> list[st.GpuBinding]:
        return parse_gpus.bindings_from_squeue(self._json(f"{self.api.slurm}/jobs"))

    def nodes(self) -> list[st.SlurmNode]:
        return cparse.parse_sinfo_json(self._json(f"{self.api.slurm}/nodes"))

    def partitions(self) -> list[st.SlurmPartition]:
        return cparse.parse_rest_partitions(self._json(f"{self.api.slurm}/partitions"))

    def associations(self) -> list[st.Association]:
        params = {"cluster": self.cluster} if self.cluster else None
        return cparse.parse_rest_associations(
            self._json(f"{self.api.slurmdb}/associations", params))

    def shares(self) -> list[st.ShareRow]:
        raise AdapterError("fairshare (sshare) has no slurmrestd endpoint in Slurm 22.05: "
                           "use the cli backend for shares", service="slurm")

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        # slurmdbd's REST job records of 22.05 carry no batch script: no labels from REST.
        return {}

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        raise AdapterError("slurmrestd 22.05 returns no job environments (dbv0.0.38 job "
                           "records have none): use the cli backend (sacct --env-vars)",
                           service="slurm")

    # --- chargeback and quotas: what 22.05's slurmrestd offers cheaply ----------------------

    def account_limits(self, account: str) -> st.Association | None:
        rows = [a for a in self.associations() if a.account == account and not a.user]
        return rows[0] if rows else None

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[st.UsageRow]:
        raise AdapterError(CANNOT[st.Action.RECONCILE], service="slurm")

    def job_allocations(self, start: datetime, end: datetime) -> list[st.JobAllocation]:
        raise AdapterError("slurmrestd 22.05 cannot truncate jobs to a window (sacct -T): "
                           "reconcile with the cli backend", service="slurm")

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> st.LimitChange:
        # POST /slurmdb/v0.0.38/associations replaces whole association records: writing one
        # limit that way risks resetting the others, so quotas are written with sacctmgr.
        raise AdapterError(CANNOT[st.Action.QUOTA_WRITE], service="slurm")

    def cancel_job(self, job_id: int) -> None:
        """``DELETE /slurm/<version>/job/{id}`` (SIGKILL by default, as scancel)."""
        path = f"{self.api.slurm}/job/{int(job_id)}"
        try:
            resp = self.session.delete(f"{self.url}{path}",
                                       timeout=(min(self.timeout, 10), self.timeout))
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise TransientAdapterError(f"slurmrestd unreachable at {self.url}: {exc}",
                                        service="slurm") from exc
        except requests.RequestException as exc:
            raise AdapterError(f"slurmrestd request failed: {exc}", service="slurm") from exc
        if resp.status_code != 200:
            if "already completing or completed" in resp.text:
                return  # ended meanwhile: nothing to cancel
            self._fail(path, resp)
        try:
            errors = resp.json().get("errors")
        except ValueError:
            errors = None
        if errors and "already completing or completed" not in json.dumps(errors):
            raise AdapterError(f"slurmrestd refused to cancel job {job_id}: "
                               f"{json.dumps(errors)[:200]}", service="slurm")


    def cannot(self, action: st.Action) -> str:
        return CANNOT.get(action, "")

    def accounted_until(self) -> datetime | None:
        return None
